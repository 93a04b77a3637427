// Raw tensors and the safetensors codec (format: safetensors_format.hpp).
//
// The decoder treats its input as hostile: every length and offset is checked against the input
// size before it is used, and nothing is allocated beyond the input's own size.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "shardsim/error.hpp"
#include "shardsim/golden/tensor_file.hpp"

namespace shardsim {

namespace {

using Json = nlohmann::json;
using format::Dtype;

std::uint64_t load_le(const char* p, std::size_t n) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < n; ++i) v |= std::uint64_t{static_cast<unsigned char>(p[i])} << (8 * i);
  return v;
}

void store_le(std::string& out, std::uint64_t v, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

// IEEE half -> double (exact).
double half_to_double(std::uint16_t h) {
  const int sign = h >> 15;
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  double v;
  if (exponent == 0) {
    v = std::ldexp(mantissa, -24);
  } else if (exponent == 31) {
    v = mantissa ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else {
    v = std::ldexp(mantissa + 1024, exponent - 25);
  }
  return sign ? -v : v;
}

std::int64_t signed_of(std::uint64_t v, std::size_t size) {
  if (size == 8) return static_cast<std::int64_t>(v);
  const std::uint64_t sign = std::uint64_t{1} << (8 * size - 1);
  return (v & sign) ? static_cast<std::int64_t>(v) - static_cast<std::int64_t>(sign << 1)
                    : static_cast<std::int64_t>(v);
}

[[noreturn]] void reject(const std::string& what, const std::string& message) {
  throw InputError(what + ": " + message);
}

// Parses the header JSON, rejecting duplicate keys at any level and nesting beyond
// kMaxHeaderDepth (nlohmann would silently keep the last duplicate).
Json parse_header(std::string_view text, const std::string& what) {
  std::vector<std::set<std::string>> open_objects;
  auto callback = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (depth > format::kMaxHeaderDepth) {
      reject(what, "invalid JSON header: nested deeper than " +
                       std::to_string(format::kMaxHeaderDepth) + " levels");
    }
    if (event == Json::parse_event_t::object_start) open_objects.emplace_back();
    if (event == Json::parse_event_t::object_end && !open_objects.empty()) open_objects.pop_back();
    if (event == Json::parse_event_t::key && !open_objects.empty()) {
      const std::string key = parsed.get<std::string>();
      if (!open_objects.back().insert(key).second) {
        reject(what, "invalid header: duplicate key '" + key + "'");
      }
    }
    return true;
  };
  try {
    return Json::parse(text.begin(), text.end(), callback);
  } catch (const Json::exception& e) {
    reject(what, std::string("invalid JSON header: ") + e.what());
  }
}

std::int64_t non_negative(const Json& value, const std::string& what, const std::string& where) {
  if (!value.is_number_unsigned()) {
    reject(what, where + ": expected a non-negative integer, got " + value.dump());
  }
  const std::uint64_t v = value.get<std::uint64_t>();
  if (v > static_cast<std::uint64_t>(INT64_MAX)) reject(what, where + ": " + value.dump() + " is too large");
  return static_cast<std::int64_t>(v);
}

struct Entry {
  RawTensor tensor;
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
};

}  // namespace

std::int64_t RawTensor::numel() const {
  // Decoded shapes are validated against the byte count, so the product fits unless an extent
  // is zero, in which case the others may be anything.
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

RawTensor raw_f32(std::string name, std::vector<std::int64_t> shape, const std::vector<float>& v) {
  RawTensor t{std::move(name), Dtype::f32, std::move(shape), {}};
  t.bytes.reserve(v.size() * 4);
  for (float x : v) store_le(t.bytes, std::bit_cast<std::uint32_t>(x), 4);
  SHARDSIM_ASSERT(static_cast<std::int64_t>(v.size()) == t.numel(), "raw_f32: size != shape");
  return t;
}

RawTensor raw_f64(std::string name, std::vector<std::int64_t> shape, const std::vector<double>& v) {
  RawTensor t{std::move(name), Dtype::f64, std::move(shape), {}};
  t.bytes.reserve(v.size() * 8);
  for (double x : v) store_le(t.bytes, std::bit_cast<std::uint64_t>(x), 8);
  SHARDSIM_ASSERT(static_cast<std::int64_t>(v.size()) == t.numel(), "raw_f64: size != shape");
  return t;
}

RawTensor raw_u8(std::string name, std::vector<std::int64_t> shape, const std::vector<double>& v) {
  RawTensor t{std::move(name), Dtype::u8, std::move(shape), {}};
  for (double x : v) {
    SHARDSIM_ASSERT(x >= 0 && x <= 255 && x == std::floor(x), "raw_u8: value is not a byte");
    t.bytes += static_cast<char>(static_cast<unsigned char>(x));
  }
  SHARDSIM_ASSERT(static_cast<std::int64_t>(v.size()) == t.numel(), "raw_u8: size != shape");
  return t;
}

std::vector<double> raw_values(const RawTensor& tensor) {
  const format::DtypeInfo& info = format::dtype_info(tensor.dtype);
  const std::size_t n = tensor.bytes.size() / info.size;
  std::vector<double> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t bits = load_le(tensor.bytes.data() + i * info.size, info.size);
    switch (tensor.dtype) {
      case Dtype::boolean: out[i] = bits != 0 ? 1.0 : 0.0; break;
      case Dtype::u8: case Dtype::u16: case Dtype::u32: case Dtype::u64:
        out[i] = static_cast<double>(bits);
        break;
      case Dtype::i8: case Dtype::i16: case Dtype::i32: case Dtype::i64:
        out[i] = static_cast<double>(signed_of(bits, info.size));
        break;
      case Dtype::f16: out[i] = half_to_double(static_cast<std::uint16_t>(bits)); break;
      case Dtype::bf16:
        out[i] = std::bit_cast<float>(static_cast<std::uint32_t>(bits << 16));
        break;
      case Dtype::f32: out[i] = std::bit_cast<float>(static_cast<std::uint32_t>(bits)); break;
      case Dtype::f64: out[i] = std::bit_cast<double>(bits); break;
    }
  }
  return out;
}

std::string encode_safetensors(const std::vector<RawTensor>& tensors,
                               const std::vector<std::pair<std::string, std::string>>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
    header[std::string(format::kMetadataKey)] = meta;
  }
  std::uint64_t offset = 0;
  for (const RawTensor& t : tensors) {
    SHARDSIM_ASSERT(!t.name.empty() && !header.contains(t.name), "safetensors: name not unique");
    SHARDSIM_ASSERT(static_cast<std::int64_t>(t.bytes.size()) ==
                        t.numel() * static_cast<std::int64_t>(format::dtype_info(t.dtype).size),
                    "safetensors: byte count does not match the shape");
    header[t.name] = {{format::kDtypeKey, format::dtype_info(t.dtype).safetensors},
                      {format::kShapeKey, t.shape},
                      {format::kOffsetsKey, {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text = header.dump();
  while ((format::kHeaderLengthBytes + text.size()) % format::kHeaderAlignment != 0) text += ' ';
  std::string out;
  out.reserve(format::kHeaderLengthBytes + text.size() + offset);
  store_le(out, text.size(), format::kHeaderLengthBytes);
  out += text;
  for (const RawTensor& t : tensors) out += t.bytes;
  return out;
}

SafetensorsFile decode_safetensors(std::string_view bytes, const std::string& what) {
  if (bytes.size() < format::kHeaderLengthBytes) {
    reject(what, "truncated: " + std::to_string(bytes.size()) +
                     " bytes, shorter than the 8-byte header length");
  }
  const std::uint64_t header_length = load_le(bytes.data(), format::kHeaderLengthBytes);
  const std::uint64_t available = bytes.size() - format::kHeaderLengthBytes;
  if (header_length > available) {
    reject(what, "header length " + std::to_string(header_length) + " runs past the end of the " +
                     std::to_string(bytes.size()) + "-byte file");
  }
  if (header_length > format::kMaxHeaderBytes) {
    reject(what, "header length " + std::to_string(header_length) + " exceeds the limit of " +
                     std::to_string(format::kMaxHeaderBytes) + " bytes");
  }
  const std::string_view text = bytes.substr(format::kHeaderLengthBytes, header_length);
  if (text.empty() || text.front() != '{') reject(what, "the header must be a JSON object starting with '{'");
  const Json header = parse_header(text, what);
  if (!header.is_object()) reject(what, "the header must be a JSON object");
  const std::uint64_t data_length = available - header_length;

  SafetensorsFile file;
  std::vector<Entry> entries;
  for (const auto& [name, value] : header.items()) {
    if (name == format::kMetadataKey) {
      if (!value.is_object()) reject(what, "__metadata__ must be an object of strings");
      for (const auto& [key, v] : value.items()) {
        if (!v.is_string()) {
          reject(what, "__metadata__." + key + ": values must be strings, got " + v.dump());
        }
        file.metadata[key] = v.get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor '" + name + "'";
    if (name.empty()) reject(what, "a tensor has an empty name");
    if (!value.is_object()) reject(what, where + ": expected an object with dtype, shape, data_offsets");
    for (const auto& [key, ignored] : value.items()) {
      if (key != format::kDtypeKey && key != format::kShapeKey && key != format::kOffsetsKey) {
        reject(what, where + ": unknown key '" + key + "'");
      }
    }
    for (std::string_view key : {format::kDtypeKey, format::kShapeKey, format::kOffsetsKey}) {
      if (!value.contains(std::string(key))) reject(what, where + ": missing '" + std::string(key) + "'");
    }
    const Json& dtype = value[std::string(format::kDtypeKey)];
    if (!dtype.is_string()) reject(what, where + ": dtype must be a string");
    const auto parsed = format::dtype_from_safetensors(dtype.get<std::string>());
    if (!parsed) reject(what, where + ": unknown dtype " + dtype.dump());
    Entry entry;
    entry.tensor.name = name;
    entry.tensor.dtype = *parsed;
    const Json& shape = value[std::string(format::kShapeKey)];
    if (!shape.is_array()) reject(what, where + ": shape must be an array of integers");
    if (shape.size() > 64) reject(what, where + ": shape has more than 64 axes");
    for (std::size_t i = 0; i < shape.size(); ++i) {
      entry.tensor.shape.push_back(non_negative(shape[i], what, where + ": shape[" + std::to_string(i) + "]"));
    }
    const Json& offsets = value[std::string(format::kOffsetsKey)];
    if (!offsets.is_array() || offsets.size() != 2) {
      reject(what, where + ": data_offsets must be [BEGIN, END]");
    }
    entry.begin = static_cast<std::uint64_t>(non_negative(offsets[0], what, where + ": data_offsets[0]"));
    entry.end = static_cast<std::uint64_t>(non_negative(offsets[1], what, where + ": data_offsets[1]"));
    if (entry.begin > entry.end) {
      reject(what, where + ": data_offsets [" + std::to_string(entry.begin) + ", " +
                       std::to_string(entry.end) + "] end before they begin");
    }
    if (entry.end > data_length) {
      reject(what, where + ": data_offsets end " + std::to_string(entry.end) +
                       " is past the end of the " + std::to_string(data_length) +
                       "-byte data section (truncated file)");
    }
    // numel * size, stopping before it could overflow: it only has to be compared with the span,
    // which is at most the data section's size.
    const std::uint64_t size = format::dtype_info(entry.tensor.dtype).size;
    const bool empty = std::find(entry.tensor.shape.begin(), entry.tensor.shape.end(), 0) !=
                       entry.tensor.shape.end();
    std::uint64_t need = empty ? 0 : size;
    bool too_big = false;
    for (std::int64_t d : entry.tensor.shape) {
      if (empty) break;
      const std::uint64_t extent = static_cast<std::uint64_t>(d);
      if (need > (entry.end - entry.begin) / extent) {
        too_big = true;
        break;
      }
      need *= extent;
    }
    if (too_big || need != entry.end - entry.begin) {
      reject(what, where + ": shape/size mismatch: data_offsets span " +
                       std::to_string(entry.end - entry.begin) + " bytes, but shape " +
                       shape.dump() + " of " + dtype.get<std::string>() + " needs " +
                       (too_big ? std::string("more") : std::to_string(need)));
    }
    entries.push_back(std::move(entry));
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end, a.tensor.name) < std::tie(b.begin, b.end, b.tensor.name);
  });
  std::uint64_t expected = 0;
  std::string previous = "the start of the data section";
  for (const Entry& entry : entries) {
    if (entry.begin < expected) {
      reject(what, "tensor '" + entry.tensor.name + "' overlaps " + previous + " (data_offsets begin " +
                       std::to_string(entry.begin) + " < " + std::to_string(expected) + ")");
    }
    if (entry.begin > expected) {
      reject(what, "hole in the data section: bytes [" + std::to_string(expected) + ", " +
                       std::to_string(entry.begin) + ") between " + previous + " and tensor '" +
                       entry.tensor.name + "' belong to no tensor");
    }
    expected = entry.end;
    if (entry.end > entry.begin) previous = "tensor '" + entry.tensor.name + "'";
  }
  if (expected != data_length) {
    reject(what, "hole in the data section: " + std::to_string(data_length - expected) +
                     " trailing bytes after " + previous + " belong to no tensor");
  }
  for (Entry& entry : entries) {
    entry.tensor.bytes.assign(bytes.substr(format::kHeaderLengthBytes + header_length + entry.begin,
                                           entry.end - entry.begin));
    file.tensors.push_back(std::move(entry.tensor));
  }
  return file;
}

}  // namespace shardsim
