// RawTensor: building F32/F64/U8 tensors from values and reading any dtype back as doubles.
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "io/tensor_file.hpp"
#include "io/byte_source.hpp"

namespace shardsim {

namespace {

using format::Dtype;
using golden_detail::load_le;
using golden_detail::store_le;

// IEEE half -> double (exact).
double half_to_double(std::uint16_t h) {
  const int sign = h >> 15;
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  double v;
  if (exponent == 0) {
    v = std::ldexp(mantissa, -24);
  } else if (exponent == 31) {
    v = mantissa ? std::numeric_limits<double>::quiet_NaN()
                 : std::numeric_limits<double>::infinity();
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

RawTensor raw_bits16(std::string name, format::Dtype dtype, std::vector<std::int64_t> shape,
                     const std::vector<std::uint16_t>& bits) {
  SHARDSIM_ASSERT(dtype == Dtype::bf16 || dtype == Dtype::f16, "raw_bits16: BF16 or F16");
  RawTensor t{std::move(name), dtype, std::move(shape), {}};
  t.bytes.reserve(bits.size() * 2);
  for (std::uint16_t b : bits) store_le(t.bytes, b, 2);
  SHARDSIM_ASSERT(static_cast<std::int64_t>(bits.size()) == t.numel(), "raw_bits16: size != shape");
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

RawTensor raw_i64(std::string name, std::vector<std::int64_t> shape, const std::vector<double>& v) {
  RawTensor t{std::move(name), Dtype::i64, std::move(shape), {}};
  t.bytes.reserve(v.size() * 8);
  for (double x : v) {
    SHARDSIM_ASSERT(x == std::floor(x) && std::abs(x) < 0x1p53, "raw_i64: value is not an id");
    store_le(t.bytes, static_cast<std::uint64_t>(static_cast<std::int64_t>(x)), 8);
  }
  SHARDSIM_ASSERT(static_cast<std::int64_t>(v.size()) == t.numel(), "raw_i64: size != shape");
  return t;
}

std::vector<double> raw_values(const RawTensor& tensor) {
  const format::DtypeInfo& info = format::dtype_info(tensor.dtype);
  const std::size_t n = tensor.bytes.size() / info.size;
  std::vector<double> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t bits = load_le(tensor.bytes.data() + i * info.size, info.size);
    switch (tensor.dtype) {
      case Dtype::boolean:
        out[i] = bits != 0 ? 1.0 : 0.0;
        break;
      case Dtype::u8:
      case Dtype::u16:
      case Dtype::u32:
      case Dtype::u64:
        out[i] = static_cast<double>(bits);
        break;
      case Dtype::i8:
      case Dtype::i16:
      case Dtype::i32:
      case Dtype::i64:
        out[i] = static_cast<double>(signed_of(bits, info.size));
        break;
      case Dtype::f16:
        out[i] = half_to_double(static_cast<std::uint16_t>(bits));
        break;
      case Dtype::bf16:
        out[i] = std::bit_cast<float>(static_cast<std::uint32_t>(bits << 16));
        break;
      case Dtype::f32:
        out[i] = std::bit_cast<float>(static_cast<std::uint32_t>(bits));
        break;
      case Dtype::f64:
        out[i] = std::bit_cast<double>(bits);
        break;
    }
  }
  return out;
}

}  // namespace shardsim
