#include "core/narrow.hpp"

#include <bit>
#include <cstring>

namespace shardsim {

std::uint16_t narrow_from_double(NarrowFormat format, double value) {
  const NarrowFormatInfo info = narrow_info(format);
  const int p = info.significand_bits;
  const int mantissa_bits = p - 1;
  const int emin = 1 - info.bias;  // exponent of the smallest normal
  const std::uint64_t bits = std::bit_cast<std::uint64_t>(value);
  const auto sign = static_cast<std::uint16_t>((bits >> 63) << 15);
  const int biased = static_cast<int>((bits >> 52) & 0x7ff);
  std::uint64_t fraction = bits & ((std::uint64_t{1} << 52) - 1);
  const std::uint16_t infinity =
      static_cast<std::uint16_t>(((1u << info.exponent_bits) - 1) << mantissa_bits);
  if (biased == 0x7ff) return sign | (fraction ? info.quiet_nan : infinity);
  if (biased == 0 && fraction == 0) return sign;
  // value = m * 2^(e - 52) with m a 53-bit integer whose top bit is set.
  int e = biased - 1023;
  std::uint64_t m = fraction | (std::uint64_t{1} << 52);
  if (biased == 0) {  // a double subnormal: normalize
    e = -1022;
    m = fraction;
    while (!(m & (std::uint64_t{1} << 52))) {
      m <<= 1;
      --e;
    }
  }
  // Keep p bits for a normal result, fewer below emin (the target's subnormals).
  const int shift = 53 - p + (e < emin ? emin - e : 0);
  if (shift >= 54) return sign;  // below half the smallest subnormal
  const std::uint64_t q = m >> shift;
  const std::uint64_t rest = m & ((std::uint64_t{1} << shift) - 1);
  const std::uint64_t half = std::uint64_t{1} << (shift - 1);
  std::uint64_t rounded = q + ((rest > half || (rest == half && (q & 1))) ? 1 : 0);
  if (e < emin) {
    // Subnormal: the exponent field is 0 and `rounded` < 2^(p-1) is the mantissa field; a carry
    // to 2^(p-1) sets the lowest exponent bit, which is exactly the smallest normal.
    return sign | static_cast<std::uint16_t>(rounded);
  }
  if (rounded == (std::uint64_t{1} << p)) {  // carried into a new binade
    rounded >>= 1;
    ++e;
  }
  const int field = e + info.bias;
  if (field >= (1 << info.exponent_bits) - 1) return sign | infinity;
  return sign | static_cast<std::uint16_t>((static_cast<std::uint64_t>(field) << mantissa_bits) |
                                           (rounded - (std::uint64_t{1} << mantissa_bits)));
}

float narrow_to_float(NarrowFormat format, std::uint16_t bits) {
  if (format == NarrowFormat::bf16) {
    return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
  }
  const std::uint32_t sign = static_cast<std::uint32_t>(bits >> 15) << 31;
  const int field = (bits >> 10) & 0x1f;
  const std::uint32_t mantissa = bits & 0x3ff;
  if (field == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  if (field == 0) {
    // Subnormal (or zero): mantissa * 2^-24, exact in float.
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | (static_cast<std::uint32_t>(field - 15 + 127) << 23) |
                              (mantissa << 13));
}

bool narrow_is_nan(NarrowFormat format, std::uint16_t bits) {
  const NarrowFormatInfo info = narrow_info(format);
  const int mantissa_bits = info.significand_bits - 1;
  const std::uint16_t exponent_mask =
      static_cast<std::uint16_t>(((1u << info.exponent_bits) - 1) << mantissa_bits);
  return (bits & exponent_mask) == exponent_mask && (bits & ((1u << mantissa_bits) - 1)) != 0;
}

std::uint64_t narrow_ulp_distance(NarrowFormat format, std::uint16_t a, std::uint16_t b) {
  if (narrow_is_nan(format, a) || narrow_is_nan(format, b)) return UINT64_MAX;
  // Sign-magnitude to a monotone integer: negatives below zero, -0 and +0 both 0.
  auto ordered = [](std::uint16_t v) -> std::int64_t {
    const std::int64_t magnitude = v & 0x7fff;
    return (v & 0x8000) ? -magnitude : magnitude;
  };
  const std::int64_t d = ordered(a) - ordered(b);
  return static_cast<std::uint64_t>(d < 0 ? -d : d);
}

}  // namespace shardsim
