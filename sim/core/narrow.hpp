// The narrow storage formats: bfloat16 and IEEE binary16, as bit patterns, with correctly
// rounded conversions and the ULP distance. Includes nothing of ours, so every layer may use it.
//
//   format  significand bits (with the implicit bit)  exponent bits  bias  largest finite
//   bf16    8                                         8              127   0x1.fep+127
//   f16     11                                        5              15    0x1.ffcp+15 (65504)
//
// Rounding (from float or double): round to nearest, ties to even, with gradual underflow
// (subnormals of the target format), overflow to the signed infinity, and NaN to the format's
// quiet NaN with the input's sign (bf16 0x7fc0, f16 0x7e00; the payload is not kept, as PyTorch
// does). A double is rounded directly, never through float: double -> float -> bf16 could round
// twice. Widening to float is exact for both formats.
#pragma once

#include <cstdint>

namespace shardsim {

enum class NarrowFormat { bf16, f16 };

struct NarrowFormatInfo {
  int significand_bits;  // with the implicit bit
  int exponent_bits;
  int bias;
  std::uint16_t quiet_nan;  // positive
};

constexpr NarrowFormatInfo narrow_info(NarrowFormat format) {
  return format == NarrowFormat::bf16 ? NarrowFormatInfo{8, 8, 127, 0x7fc0}
                                      : NarrowFormatInfo{11, 5, 15, 0x7e00};
}

// Correctly rounded conversions to the format's bit pattern.
std::uint16_t narrow_from_double(NarrowFormat format, double value);
inline std::uint16_t narrow_from_float(NarrowFormat format, float value) {
  return narrow_from_double(format, static_cast<double>(value));  // float -> double is exact
}
// Exact.
float narrow_to_float(NarrowFormat format, std::uint16_t bits);

// ULP distance by the ordered-integer mapping (±0 at distance 0; a NaN gives UINT64_MAX).
std::uint64_t narrow_ulp_distance(NarrowFormat format, std::uint16_t a, std::uint16_t b);
bool narrow_is_nan(NarrowFormat format, std::uint16_t bits);

}  // namespace shardsim
