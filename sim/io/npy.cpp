// The npy codec (format: safetensors_format.hpp, after numpy's NEP 1).
//
// The decoder treats its input as hostile: the header is parsed by a small strict grammar (no
// Python evaluation), and every length is checked against the input size before it is used; the
// data is read only once its size matches the header's shape.
#include <algorithm>
#include <cctype>
#include <cstdio>

#include "core/error.hpp"
#include "io/tensor_file.hpp"
#include "io/byte_source.hpp"

namespace shardsim {

namespace {

using format::Dtype;

using golden_detail::reject;

std::string shape_tuple(const std::vector<std::int64_t>& shape) {
  std::string out = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    out += (i ? ", " : "") + std::to_string(shape[i]);
  }
  if (shape.size() == 1) out += ",";
  return out + ")";
}

// The header dict: {'descr': STR, 'fortran_order': BOOL, 'shape': TUPLE} in any order, keys
// once each, an optional trailing comma, then only spaces and newlines.
struct NpyHeader {
  std::string descr;
  bool fortran_order = false;
  std::vector<std::int64_t> shape;
};

class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& what) : text_(text), what_(what) {}

  NpyHeader parse() {
    NpyHeader header;
    bool seen_descr = false, seen_order = false, seen_shape = false;
    expect('{');
    while (true) {
      skip_spaces();
      if (peek() == '}') break;
      const std::string key = string_literal();
      expect(':');
      if (key == "descr") {
        if (seen_descr) fail("duplicate key 'descr'");
        seen_descr = true;
        header.descr = string_literal();
      } else if (key == "fortran_order") {
        if (seen_order) fail("duplicate key 'fortran_order'");
        seen_order = true;
        header.fortran_order = boolean_literal();
      } else if (key == "shape") {
        if (seen_shape) fail("duplicate key 'shape'");
        seen_shape = true;
        header.shape = int_tuple();
      } else {
        fail("unknown key " + quote(key));
      }
      skip_spaces();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() != '}') fail("expected ',' or '}'");
    }
    expect('}');
    while (pos_ < text_.size()) {
      if (text_[pos_] != ' ' && text_[pos_] != '\n') fail("unexpected text after the header dict");
      ++pos_;
    }
    if (!seen_descr || !seen_order || !seen_shape) {
      fail("the header needs 'descr', 'fortran_order' and 'shape'");
    }
    return header;
  }

 private:
  [[noreturn]] void fail(const std::string& message) {
    reject(what_, "invalid npy header at byte " + std::to_string(pos_) + ": " + message);
  }
  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void skip_spaces() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n')) ++pos_;
  }
  void expect(char c) {
    skip_spaces();
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }
  std::string string_literal() {
    skip_spaces();
    const char quote = peek();
    if (quote != '\'' && quote != '"') fail("expected a quoted string");
    ++pos_;
    std::string out;
    while (pos_ < text_.size() && text_[pos_] != quote) {
      const unsigned char c = static_cast<unsigned char>(text_[pos_]);
      if (c == '\\' || c < 0x20 || c > 0x7e) fail("unsupported character in a string");
      out += text_[pos_++];
    }
    if (pos_ >= text_.size()) fail("unterminated string");
    ++pos_;
    return out;
  }
  bool boolean_literal() {
    skip_spaces();
    if (text_.substr(pos_, 4) == "True") {
      pos_ += 4;
      return true;
    }
    if (text_.substr(pos_, 5) == "False") {
      pos_ += 5;
      return false;
    }
    fail("expected True or False");
  }
  std::vector<std::int64_t> int_tuple() {
    std::vector<std::int64_t> out;
    expect('(');
    while (true) {
      skip_spaces();
      if (peek() == ')') break;
      if (!std::isdigit(static_cast<unsigned char>(peek()))) fail("expected a non-negative integer");
      std::int64_t v = 0;
      while (std::isdigit(static_cast<unsigned char>(peek()))) {
        if (v > (INT64_MAX - 9) / 10) fail("shape extent too large");
        v = v * 10 + (text_[pos_++] - '0');
      }
      if (peek() == 'L') ++pos_;  // Python 2 longs
      out.push_back(v);
      if (out.size() > 64) fail("more than 64 axes");
      skip_spaces();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() != ')') fail("expected ',' or ')'");
    }
    expect(')');
    return out;
  }

  std::string_view text_;
  const std::string& what_;
  std::size_t pos_ = 0;
};

}  // namespace

std::string encode_npy(const RawTensor& tensor) {
  // BF16 has no npy dtype: its bit patterns go out as '<u2' (docs/goldens.md "bf16 in npy").
  const format::DtypeInfo& info =
      format::dtype_info(tensor.dtype == Dtype::bf16 ? Dtype::u16 : tensor.dtype);
  SHARDSIM_ASSERT(!info.npy.empty(), "encode_npy: dtype has no npy descr");
  std::string dict = "{'descr': '" + std::string(info.npy) +
                     "', 'fortran_order': False, 'shape': " + shape_tuple(tensor.shape) + ", }";
  // Pad with spaces and end with '\n' so that the data starts at a multiple of kNpyAlignment.
  std::size_t total = format::kNpyPreambleV1 + dict.size() + 1;
  const std::size_t padded = (total + format::kNpyAlignment - 1) / format::kNpyAlignment *
                             format::kNpyAlignment;
  dict.append(padded - total, ' ');
  dict += '\n';
  SHARDSIM_ASSERT(dict.size() <= 0xffff, "npy header too long for version 1.0");
  std::string out(format::kNpyMagic);
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(dict.size() & 0xff);
  out += static_cast<char>(dict.size() >> 8);
  out += dict;
  out += tensor.bytes;
  return out;
}

namespace {

// The preamble and the header dict, checked against the source's size. Sets `data_start`.
NpyHeader read_header(const golden_detail::ByteSource& source, const std::string& what,
                      std::uint64_t& data_start) {
  if (source.size() < format::kNpyPreambleV1) {
    reject(what,
           "truncated: " + std::to_string(source.size()) + " bytes, shorter than the npy preamble");
  }
  std::string preamble = source.read(0, format::kNpyPreambleV1);
  if (std::string_view(preamble).substr(0, format::kNpyMagic.size()) != format::kNpyMagic) {
    reject(what, "not an npy file (the magic \\x93NUMPY is missing)");
  }
  const unsigned major = static_cast<unsigned char>(preamble[6]);
  const unsigned minor = static_cast<unsigned char>(preamble[7]);
  if (major < 1 || major > 3 || minor != 0) {
    reject(what, "unsupported npy version " + std::to_string(major) + "." + std::to_string(minor));
  }
  if (major >= 2) {
    if (source.size() < format::kNpyPreambleV2) reject(what, "truncated npy preamble");
    preamble = source.read(0, format::kNpyPreambleV2);
  }
  const std::uint64_t header_length =
      golden_detail::load_le(preamble.data() + 8, major >= 2 ? 4 : 2);
  if (header_length > source.size() - preamble.size()) {
    reject(what, "header length " + std::to_string(header_length) + " runs past the end of the " +
                     std::to_string(source.size()) + "-byte file");
  }
  if (header_length > format::kNpyMaxHeaderBytes) {
    reject(what, "header length " + std::to_string(header_length) + " exceeds the limit of " +
                     std::to_string(format::kNpyMaxHeaderBytes) + " bytes");
  }
  data_start = preamble.size() + header_length;
  const std::string text = source.read(preamble.size(), header_length);
  const NpyHeader header = HeaderParser(text, what).parse();
  if (header.fortran_order) {
    reject(what, "fortran_order True is not supported; save with np.ascontiguousarray(a)");
  }
  return header;
}

// The dtype of an npy descr ('<f8', '>i4', '|u1').
Dtype descr_dtype(const std::string& descr, const std::string& what) {
  if (descr.size() >= 3) {
    const char order = descr[0];
    for (const format::DtypeInfo& info : format::kDtypes) {
      if (info.npy.empty() || info.npy.substr(1) != descr.substr(1)) continue;
      if (order == '<' || order == '>' || (order == '|' && info.size == 1)) return info.dtype;
    }
  }
  reject(what, "unknown or unsupported dtype " + quote(descr) +
                   " (supported: b1, u1, i1, u2, i2, u4, i4, u8, i8, f2, f4, f8)");
}

RawTensor decode(const golden_detail::ByteSource& source, const std::string& what) {
  std::uint64_t data_start = 0;
  const NpyHeader header = read_header(source, what, data_start);
  RawTensor tensor;
  tensor.dtype = descr_dtype(header.descr, what);
  tensor.shape = header.shape;
  const std::uint64_t data_length = source.size() - data_start;
  const std::uint64_t size = format::dtype_info(tensor.dtype).size;
  const bool empty = std::find(tensor.shape.begin(), tensor.shape.end(), 0) != tensor.shape.end();
  std::uint64_t need = empty ? 0 : size;
  bool too_big = false;  // the byte count does not fit 64 bits
  for (std::int64_t d : tensor.shape) {
    if (empty) break;
    if (__builtin_mul_overflow(need, static_cast<std::uint64_t>(d), &need)) {
      too_big = true;
      break;
    }
  }
  if (too_big || need > data_length) {
    reject(what, "truncated data: shape " + shape_tuple(tensor.shape) + " of '" + header.descr +
                     "' needs " + (too_big ? std::string("more than 2^64") : std::to_string(need)) +
                     " bytes, the file holds " + std::to_string(data_length));
  }
  if (need < data_length) {
    reject(what, "shape/size mismatch: shape " + shape_tuple(tensor.shape) + " of '" +
                     header.descr + "' needs " + std::to_string(need) + " bytes, the file holds " +
                     std::to_string(data_length) + " (trailing bytes)");
  }
  // Only now, with the size checked against the header, is the data read.
  tensor.bytes = source.read(data_start, data_length);
  if (header.descr[0] == '>' && size > 1) {
    for (std::size_t i = 0; i < tensor.bytes.size(); i += size) {
      std::reverse(tensor.bytes.begin() + static_cast<std::ptrdiff_t>(i),
                   tensor.bytes.begin() + static_cast<std::ptrdiff_t>(i + size));
    }
  }
  if (tensor.dtype == Dtype::boolean) {
    for (char& c : tensor.bytes) c = c != 0 ? 1 : 0;
  }
  return tensor;
}

}  // namespace

RawTensor decode_npy(std::string_view bytes, const std::string& what) {
  return decode(golden_detail::MemorySource(bytes), what);
}

RawTensor read_npy(const std::string& path) {
  return decode(golden_detail::FileSource(path), path);
}

std::string npy_file_name(std::string_view name) {
  static constexpr std::string_view kSafe = "._()[]=:@+#-";
  std::string out;
  for (char c : name) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '/') {
      out += "__";
    } else if (std::isalnum(u) && u < 0x80) {
      out += c;
    } else if (kSafe.find(c) != std::string_view::npos) {
      out += c;
    } else {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%%%02X", u);
      out += hex;
    }
  }
  return out + ".npy";
}

}  // namespace shardsim
