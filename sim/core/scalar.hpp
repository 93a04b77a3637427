// Precision levels, rounding and ULP distance.
//
// A run happens at exactly one Precision: bf16 or f16 (narrow storage, storage.hpp), f32
// (float), f64 (double), dd or qd (double-double and quad-double from the QD library, see qd.hpp)
// or mp<bits> (Boost Multiprecision over MPFR, see mp.hpp). This header
// includes nothing of ours and nothing of MPFR, so every layer may use it.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

namespace shardsim {

// bf16 and f16 runs compute with float and store every boundary value in the narrow format
// (storage.hpp has the rounding points).
enum class ScalarKind { f32, f64, mp, bf16, f16, dd, qd };

struct Precision {
  ScalarKind kind = ScalarKind::f64;
  // Requested significand bits including the implicit bit: 8 for bf16, 11 for f16, 24 for f32,
  // 53 for f64, 106 for dd, 212 for qd, N for mpN.
  unsigned bits = 53;

  std::string name() const;  // "bf16", "f16", "f32", "f64", "dd", "qd", "mp256"
  bool is_narrow() const { return kind == ScalarKind::bf16 || kind == ScalarKind::f16; }
  // dd and qd: a sum of 2 or 4 doubles (qd.hpp).
  bool is_expansion() const { return kind == ScalarKind::dd || kind == ScalarKind::qd; }
  // mp, dd and qd runs capture each value exactly (CapturedValues::exact), and the precision
  // ladder compares them exactly.
  bool has_exact_values() const { return kind == ScalarKind::mp || is_expansion(); }
  friend bool operator==(const Precision&, const Precision&) = default;
};

inline constexpr unsigned kMinMpBits = 64;
inline constexpr unsigned kMaxMpBits = 65536;

// Parses "bf16", "f16", "f32", "f64", "dd", "qd" or "mp<bits>" with kMinMpBits <= bits <=
// kMaxMpBits. Throws InputError naming the text and the accepted forms otherwise.
Precision parse_precision(std::string_view text);

// Default per-precision tolerance, relative to the tensor's largest magnitude (normwise):
//   f32, f64,     2^(16 - bits), i.e. 65536 units in the last place.
//   dd, qd, mp invariant 5 (docs/architecture.md
//                 "Invariants") asks mp runs to agree to ~2^-(bits-16).
//   bf16, f16     2^(5 - bits): 2^-3 for bf16, 2^-6 for f16, i.e. 16 ulps of the largest value.
//                 Two correct programs that differ only in f32 accumulation order round their
//                 nearly equal f32 results to neighbouring narrow values: up to 1 ulp
//                 (2^(1 - bits) relative) per rounded boundary, carried through the later ops.
//                 The rule allows 16 such ulps (a chain of ~8 boundaries with a gain of 2), where
//                 2^(16 - bits) would be 2^8 = 256 at bf16 and accept anything.
//                 docs/precisions.md "Narrow precisions" gives the derivation and the gaps the
//                 bundled scenarios show.
double default_rtol(const Precision& precision);

// ULP distance by the ordered-integer mapping: the bit patterns are mapped to integers that are
// monotone in the value, so the distance counts representable numbers between a and b.
// +0 and -0 are at distance 0. A NaN on either side gives kUlpNaN (never equal).
inline constexpr std::uint64_t kUlpNaN = UINT64_MAX;
std::uint64_t ulp_distance(float a, float b);
std::uint64_t ulp_distance(double a, double b);

// The dd and qd scalars (qd.hpp) are Expansion<dd_real> and Expansion<qd_real>; generic code
// tests for them with kIsExpansion without including QD.
template <typename R>
class Expansion;
template <typename T>
inline constexpr bool kIsExpansion = false;
template <typename R>
inline constexpr bool kIsExpansion<Expansion<R>> = true;
// Their exact dot product (qd_dot.hpp), the contraction kernels' accumulator for dd and qd
// (ops/dot_sum.hpp).
template <typename R>
class ExactDot;
// The golden formats in whose rounding a dd/qd value lies near a midpoint (qd_exact.hpp), as bits
// of CapturedValues::near_midpoint; the golden writer tests each family's bit.
inline constexpr std::uint8_t kNearF64 = 1;
inline constexpr std::uint8_t kNearF32 = 2;
inline constexpr std::uint8_t kNearBf16 = 4;
inline constexpr std::uint8_t kNearF16 = 8;

// Per-scalar facts the generic layers need. Specialized for float and double here, for Mp in
// mp.hpp.
//   name        the dtype a collective descriptor carries ("f32", "f64", "mp")
//   to_double   round to nearest double (for printing metrics)
//   ulp         ULP distance between two values, as a double (NaN pair -> kUlpNaN)
//   identical   bitwise the same value (so -0 and +0 differ; NaN is never identical)
template <typename T>
struct ScalarTraits;

template <>
struct ScalarTraits<float> {
  static constexpr const char* name = "f32";
  static double to_double(float v) { return v; }
  static double ulp(float a, float b) { return static_cast<double>(ulp_distance(a, b)); }
  static bool identical(float a, float b);
};

template <>
struct ScalarTraits<double> {
  static constexpr const char* name = "f64";
  static double to_double(double v) { return v; }
  static double ulp(double a, double b) { return static_cast<double>(ulp_distance(a, b)); }
  static bool identical(double a, double b);
};

// Arithmetic into an existing value, for hot loops: out = a op b, one rounding to nearest, exactly
// what the operator gives. For float and double these are the operators; mp.hpp specializes them
// for Mp to call MPFR on the operands' own storage, so a loop that reuses `out` allocates nothing
// per element (Boost's operators construct, and so heap-allocate, every temporary). `out` may
// alias `a` or `b`.
template <typename T>
inline void add_into(T& out, const T& a, const T& b) {
  out = a + b;
}
template <typename T>
inline void sub_into(T& out, const T& a, const T& b) {
  out = a - b;
}
template <typename T>
inline void mul_into(T& out, const T& a, const T& b) {
  out = a * b;
}

// v[i] = exp(v[i]) for i < n, each value exactly as the scalar exp gives it. qd.hpp overloads it
// for qd, whose exp runs several values at once (qd_exp.cpp). n is not deduced, so a call with
// any integer type picks that overload for qd.
template <typename T>
void exp_each(T* v, std::int64_t n) {
  using std::exp;
  for (std::int64_t i = 0; i < n; ++i) v[i] = exp(v[i]);
}

}  // namespace shardsim
