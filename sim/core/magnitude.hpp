// A non-negative magnitude kept as mantissa * 2^exponent, for the precision diff's metrics.
//
// A gap at an mp level is about 2^-bits relative: 2^-1024 at mp1024 and 2^-2048 at mp2048, far
// below the smallest double (2^-1074, about 4.9e-324; the smallest normal one is 2^-1022). As a
// double such a gap reads 0, and log2 of it is -inf. A Magnitude keeps the exponent in a long,
// so it is exact to the double's 53 bits at any mp level.
//
// Invariants: the value is 0 (mantissa 0, exponent 0), +inf, NaN, or mantissa in [0.5, 1) with
// any exponent (the convention of std::frexp and mpfr_get_d_2exp).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace shardsim {

class Magnitude {
 public:
  Magnitude() = default;  // 0

  // |v| (NaN stays NaN, infinities are +inf).
  static Magnitude of(double v);
  // m * 2^e for any finite m (its sign is dropped) and any e.
  static Magnitude scaled(double m, long e);
  static Magnitude infinity();
  static Magnitude nan();
  // "2^E" (E a decimal integer: "2^-2000" is exact) or a decimal or hexadecimal floating-point
  // literal ("1e-700", "0x1p-2000"), rounded once to 53 bits with no underflow; for values a
  // double cannot hold. nullopt for any other text, a negative value, inf or NaN.
  static std::optional<Magnitude> parse(std::string_view text);

  bool is_zero() const { return mantissa_ == 0; }
  bool is_nan() const;
  bool is_finite() const;  // neither inf nor NaN
  double mantissa() const { return mantissa_; }
  long exponent() const { return exponent_; }

  // log2 of the value: -inf for 0, +inf for inf, NaN for NaN.
  double log2() const;
  // The nearest double: 0 below the double range, inf above it.
  double to_double() const;
  // Scientific text with `digits` digits after the point ("2.80e-617"), exactly rounded; "0",
  // "inf" and "nan" as such.
  std::string sci(int digits = 2) const;

  friend Magnitude operator*(const Magnitude& a, const Magnitude& b);
  // a / b: 0 / 0 is 0 (no gap over no scale), x / 0 is inf for x > 0.
  friend Magnitude operator/(const Magnitude& a, const Magnitude& b);
  // Ordered as the values are; NaN compares false with everything (as a double does).
  friend bool operator<(const Magnitude& a, const Magnitude& b);
  friend bool operator==(const Magnitude& a, const Magnitude& b);
  friend bool operator>(const Magnitude& a, const Magnitude& b) { return b < a; }
  friend bool operator<=(const Magnitude& a, const Magnitude& b) { return a < b || a == b; }

 private:
  double mantissa_ = 0;
  long exponent_ = 0;
};

// The larger of a and b; NaN wins (a NaN metric must not be hidden by a later finite one).
Magnitude max(const Magnitude& a, const Magnitude& b);

}  // namespace shardsim
