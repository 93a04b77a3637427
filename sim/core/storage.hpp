// Narrow storage: how a bf16 or f16 run computes and where it rounds (docs/precisions.md "Narrow
// precisions" has the table per op).
//
// A narrow run models a program whose tensors are stored in bf16 or f16 (PyTorch autocast,
// cuBLAS with f32 compute):
//   accumulate = "f32"      (default) the kernels run in float; every boundary value that a
//                           program stores (inputs and parameters after init, each op's
//                           output, each collective's output, gradients, updated parameters)
//                           is rounded once to the narrow format, round-to-nearest-even. So a
//                           reduction (sums, dot products, mean/var, softmax denominators, a
//                           collective's sum) accumulates in f32 and rounds once, at the op's
//                           output. An op's internal parts (LayerNorm/RMSNorm statistics, row
//                           sums, attention's q/k/v/scores/lse, the loss and its partial sums)
//                           stay f32, as PyTorch keeps them.
//   accumulate = "storage"  the kernels run in NarrowFloat (narrow_float.hpp): every arithmetic
//                           result is rounded to the narrow format, as a kernel that accumulates
//                           in bf16 would; parts and the loss included.
// This header includes only scalar.hpp and narrow.hpp, so every layer may use it.
#pragma once

#include <bit>
#include <cstdint>
#include <optional>
#include <string_view>

#include "core/narrow.hpp"
#include "core/scalar.hpp"

namespace shardsim {

enum class Accumulate { f32, storage };

std::string_view accumulate_name(Accumulate accumulate);  // "f32", "storage"
std::optional<Accumulate> parse_accumulate(std::string_view text);

// The format of a narrow precision. REQUIRES: precision.is_narrow().
NarrowFormat narrow_format(const Precision& precision);
const char* narrow_name(NarrowFormat format);  // "bf16", "f16"

// float -> nearest bf16, widened back to float (exact). The same result as narrow_from_float,
// branch-light for the hot boundary loops: adding 0x7fff plus the lowest kept bit to the f32 bit
// pattern and truncating the low 16 bits is round-to-nearest-even on the 8-bit significand, for
// subnormals too (bf16 has f32's exponent range), and a carry out of the largest finite binade
// yields the infinity. NaN becomes the quiet NaN with the input's sign.
// (Written as a select rather than an early return, so that loops over it vectorize.)
inline float round_to_bf16(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  const std::uint32_t quiet_nan = (bits & 0x80000000u) | 0x7fc00000u;
  const std::uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;
  return std::bit_cast<float>((bits & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

// float -> nearest f16, widened back to float (exact); the same result as narrow_from_float.
// Normal range (|v| >= 2^-14): the bit trick above on 13 dropped bits, then anything above the
// largest finite f16 (65504) is the infinity. Below 2^-14 the f16 grid is the multiples of
// 2^-24: |v| * 2^24 (exact) is rounded to an integer by adding and subtracting 2^23 (one
// rounding to nearest even, since the sum lies in [2^23, 2^24)).
inline float round_to_f16(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  const std::uint32_t sign = bits & 0x80000000u;
  std::uint32_t magnitude = bits ^ sign;
  if (magnitude > 0x7f800000u) return std::bit_cast<float>(sign | 0x7fc00000u);
  if (magnitude >= 0x38800000u) {  // 2^-14, the smallest normal f16
    magnitude += 0xfffu + ((magnitude >> 13) & 1u);
    magnitude &= 0xffffe000u;
    if (magnitude > 0x477fe000u) magnitude = 0x7f800000u;  // past 65504
    return std::bit_cast<float>(sign | magnitude);
  }
  const float units = std::bit_cast<float>(magnitude) * 0x1p24f;
  const float rounded = (units + 0x1p23f) - 0x1p23f;
  return std::bit_cast<float>(sign | std::bit_cast<std::uint32_t>(rounded * 0x1p-24f));
}

inline float round_to_narrow(NarrowFormat format, float value) {
  return format == NarrowFormat::bf16 ? round_to_bf16(value) : round_to_f16(value);
}

// Rounds n floats in place.
void round_to_narrow(NarrowFormat format, float* values, std::int64_t n);

}  // namespace shardsim
