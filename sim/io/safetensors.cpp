// The safetensors codec (format: safetensors_format.hpp).
//
// The decoder treats its input as hostile: the header length is checked against the input size,
// then every entry's offsets against the data section's declared length, before any data byte is
// read; nothing is allocated beyond the input's own size.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "io/tensor_file.hpp"
#include "io/byte_source.hpp"

namespace shardsim {

namespace {

using Json = nlohmann::json;
using golden_detail::ByteSource;
using golden_detail::load_le;
using golden_detail::reject;
using golden_detail::store_le;

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
        reject(what, "invalid header: duplicate key " + quote(key));
      }
    }
    return true;
  };
  // The JSON parser takes a NUL byte for the end of its input, which would accept anything
  // after one; JSON text has no NUL (safetensors pads its header with spaces).
  if (const std::size_t nul = text.find('\0'); nul != std::string_view::npos) {
    reject(what, "invalid JSON header: a NUL byte at offset " + std::to_string(nul));
  }
  try {
    return Json::parse(text.begin(), text.end(), callback);
  } catch (const Json::exception& e) {
    reject(what, std::string("invalid JSON header: ") + e.what());
  }
}

std::int64_t non_negative(const Json& value, const std::string& what, const std::string& where) {
  if (!value.is_number_unsigned()) {
    reject(what, where + ": expected a non-negative integer, got " + clipped(value.dump()));
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

// numel(shape) * size, stopping before it could overflow: it is only compared with `span`. Sets
// `too_big` when the product exceeds `span`.
std::uint64_t byte_count(const std::vector<std::int64_t>& shape, std::uint64_t size,
                         std::uint64_t span, bool& too_big) {
  too_big = false;
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  std::uint64_t need = size;
  for (std::int64_t d : shape) {
    const std::uint64_t extent = static_cast<std::uint64_t>(d);
    if (need > span / extent) {
      too_big = true;
      return need;
    }
    need *= extent;
  }
  return need;
}

// One tensor's header entry, checked against the data section's length.
Entry parse_entry(const std::string& name, const Json& value, std::uint64_t data_length,
                  const std::string& what) {
  const std::string where = "tensor " + quote(name);
  if (name.empty()) reject(what, "a tensor has an empty name");
  if (!value.is_object())
    reject(what, where + ": expected an object with dtype, shape, data_offsets");
  for (const auto& [key, ignored] : value.items()) {
    if (key != format::kDtypeKey && key != format::kShapeKey && key != format::kOffsetsKey) {
      reject(what, where + ": unknown key " + quote(key));
    }
  }
  for (std::string_view key : {format::kDtypeKey, format::kShapeKey, format::kOffsetsKey}) {
    if (!value.contains(std::string(key)))
      reject(what, where + ": missing '" + std::string(key) + "'");
  }
  const Json& dtype = value[std::string(format::kDtypeKey)];
  if (!dtype.is_string()) reject(what, where + ": dtype must be a string");
  const auto parsed = format::dtype_from_safetensors(dtype.get<std::string>());
  if (!parsed) reject(what, where + ": unknown dtype " + clipped(dtype.dump()));
  Entry entry;
  entry.tensor.name = name;
  entry.tensor.dtype = *parsed;
  const Json& shape = value[std::string(format::kShapeKey)];
  if (!shape.is_array()) reject(what, where + ": shape must be an array of integers");
  if (shape.size() > 64) reject(what, where + ": shape has more than 64 axes");
  for (std::size_t i = 0; i < shape.size(); ++i) {
    entry.tensor.shape.push_back(
        non_negative(shape[i], what, where + ": shape[" + std::to_string(i) + "]"));
  }
  const Json& offsets = value[std::string(format::kOffsetsKey)];
  if (!offsets.is_array() || offsets.size() != 2)
    reject(what, where + ": data_offsets must be [BEGIN, END]");
  entry.begin =
      static_cast<std::uint64_t>(non_negative(offsets[0], what, where + ": data_offsets[0]"));
  entry.end =
      static_cast<std::uint64_t>(non_negative(offsets[1], what, where + ": data_offsets[1]"));
  if (entry.begin > entry.end) {
    reject(what, where + ": data_offsets [" + std::to_string(entry.begin) + ", " +
                     std::to_string(entry.end) + "] end before they begin");
  }
  if (entry.end > data_length) {
    reject(what, where + ": data_offsets end " + std::to_string(entry.end) +
                     " is past the end of the " + std::to_string(data_length) +
                     "-byte data section (truncated file)");
  }
  bool too_big = false;
  const std::uint64_t need = byte_count(entry.tensor.shape, format::dtype_info(*parsed).size,
                                        entry.end - entry.begin, too_big);
  if (too_big || need != entry.end - entry.begin) {
    reject(what, where + ": shape/size mismatch: data_offsets span " +
                     std::to_string(entry.end - entry.begin) + " bytes, but shape " + shape.dump() +
                     " of " + dtype.get<std::string>() + " needs " +
                     (too_big ? std::string("more") : std::to_string(need)));
  }
  return entry;
}

// Sorts the entries by offset and checks that they tile [0, data_length) exactly.
void check_tiling(std::vector<Entry>& entries, std::uint64_t data_length, const std::string& what) {
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end, a.tensor.name) < std::tie(b.begin, b.end, b.tensor.name);
  });
  std::uint64_t expected = 0;
  std::string previous = "the start of the data section";
  for (const Entry& entry : entries) {
    if (entry.begin < expected) {
      reject(what, "tensor " + quote(entry.tensor.name) + " overlaps " + previous +
                       " (data_offsets begin " + std::to_string(entry.begin) + " < " +
                       std::to_string(expected) + ")");
    }
    if (entry.begin > expected) {
      reject(what, "hole in the data section: bytes [" + std::to_string(expected) + ", " +
                       std::to_string(entry.begin) + ") between " + previous + " and tensor " +
                       quote(entry.tensor.name) + " belong to no tensor");
    }
    expected = entry.end;
    if (entry.end > entry.begin) previous = "tensor " + quote(entry.tensor.name);
  }
  if (expected != data_length) {
    reject(what, "hole in the data section: " + std::to_string(data_length - expected) +
                     " trailing bytes after " + previous + " belong to no tensor");
  }
}

// The header length and text, checked against the source's size.
std::string read_header(const ByteSource& source, const std::string& what) {
  if (source.size() < format::kHeaderLengthBytes) {
    reject(what, "truncated: " + std::to_string(source.size()) +
                     " bytes, shorter than the 8-byte header length");
  }
  const std::string length_bytes = source.read(0, format::kHeaderLengthBytes);
  const std::uint64_t header_length = load_le(length_bytes.data(), format::kHeaderLengthBytes);
  const std::uint64_t available = source.size() - format::kHeaderLengthBytes;
  if (header_length > available) {
    reject(what, "header length " + std::to_string(header_length) + " runs past the end of the " +
                     std::to_string(source.size()) + "-byte file");
  }
  if (header_length > format::kMaxHeaderBytes) {
    reject(what, "header length " + std::to_string(header_length) + " exceeds the limit of " +
                     std::to_string(format::kMaxHeaderBytes) + " bytes");
  }
  return source.read(format::kHeaderLengthBytes, header_length);
}

SafetensorsFile decode(const ByteSource& source, const std::string& what) {
  const std::string text = read_header(source, what);
  if (text.empty() || text.front() != '{')
    reject(what, "the header must be a JSON object starting with '{'");
  const Json header = parse_header(text, what);
  if (!header.is_object()) reject(what, "the header must be a JSON object");
  const std::uint64_t data_start = format::kHeaderLengthBytes + text.size();
  const std::uint64_t data_length = source.size() - data_start;
  SafetensorsFile file;
  std::vector<Entry> entries;
  for (const auto& [name, value] : header.items()) {
    if (name != format::kMetadataKey) {
      entries.push_back(parse_entry(name, value, data_length, what));
      continue;
    }
    if (!value.is_object()) reject(what, "__metadata__ must be an object of strings");
    for (const auto& [key, v] : value.items()) {
      if (!v.is_string())
        reject(what, "__metadata__." + clipped(key) + ": values must be strings, got " +
                         clipped(v.dump()));
      file.metadata[key] = v.get<std::string>();
    }
  }
  check_tiling(entries, data_length, what);
  // Only now, with every length checked against the size, is the data read.
  for (Entry& entry : entries) {
    entry.tensor.bytes = source.read(data_start + entry.begin, entry.end - entry.begin);
    file.tensors.push_back(std::move(entry.tensor));
  }
  return file;
}

}  // namespace

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
  return decode(golden_detail::MemorySource(bytes), what);
}

SafetensorsFile read_safetensors(const std::string& path) {
  return decode(golden_detail::FileSource(path), path);
}

}  // namespace shardsim
