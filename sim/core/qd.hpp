// The fast reference scalars dd (double-double, 106 bits) and qd (quad-double, 212 bits), from the
// QD library (Hida, Li, Bailey; Debian libqd-dev).
//
// A value is an unevaluated sum of 2 (dd) or 4 (qd) doubles, x0 + x1 (+ x2 + x3), renormalized by
// QD after every operation so that |x(i+1)| <= ulp(x(i)) / 2 (almost always; the roundings below
// check it and fall back to MPFR when it does not hold). Expansion<R> wraps QD's dd_real or qd_real
// with the interface the templated kernels use (the one Mp and NarrowFloat have), and fixes three
// things QD leaves open:
//   arithmetic   + and - are QD's IEEE-style additions (fl(a + b) = (a + b)(1 + d), |d| <= c eps)
//                rather than QD's default "sloppy" ones, whose error is relative to the operands,
//                not the result, and so unbounded relative to a cancelled difference; * and / are
//                QD's accurate versions. eps = 2^-104 (dd), 2^-209 (qd).
//   non-finite   QD's kernels produce NaN from an infinite operand (inf - inf in the error term);
//                here an operation with a non-finite operand or result gives the IEEE double
//                result of the leading terms (so -inf + 1 = -inf, as the attention kernels'
//                running max needs), and sqrt, log, acos, pow outside their domain give NaN or
//                -inf without QD's error messages.
//   erf          QD has none: qd.cpp implements it (series and continued fraction) in dd/qd
//                arithmetic, with its accuracy derived there.
// exp, log, sqrt, sin, cos, acos, tanh and pow (= exp(b log a)) are QD's. exp_each (below) runs
// QD's exp on four values at a time with QD's bits (qd_exp.cpp).
//
// Determinism: QD is plain double arithmetic, so results depend neither on the machine nor on the
// thread count. One exception to "plain", in the inline arithmetic compiled here: the exact
// product two_prod(a, b) = (p, e), p = fl(a b), e = a b - p, takes e from fma(a, b, -p) (QD's
// QD_FMS hook, defined below) instead of Dekker's splitting (Debian's build, qd_config.h, has
// neither). Both give e exactly whenever a b - p is representable, that is, unless it falls below
// the normal range (|a b| under about 2^-969), so the results are the same bits; fma is one
// correctly rounded IEEE operation, so machine independence holds: on x86-64 CPUs with FMA3 it is
// that instruction, inline (detail::fused_multiply_subtract below: a call to glibc's fma costs
// more than the instruction), elsewhere glibc's fma (exact in software where the CPU has no FMA).
// A whole qd run got about 14% faster with glibc's fma (docs/benchmarks.md); the inline
// instruction took QD's sequential qd multiply-add from about 106 to 83 ns in a microbenchmark.
// QD's compiled functions (exp, log, sin, ...) keep Dekker's. Only the translation units that
// instantiate kernels for Dd or Qd include this header.
#pragma once

#include <cmath>

namespace shardsim::detail {
// Whether this CPU runs FMA3 instructions (qd.cpp; read once, at start-up).
extern const bool kCpuHasFma;
// a b - c rounded once.
inline double fused_multiply_subtract(double a, double b, double c) {
#if defined(__x86_64__) && !defined(__FMA__)
  if (kCpuHasFma) {  // VFMSUB213SD: a = a b - c, one rounding
    asm("vfmsub213sd %2, %1, %0" : "+x"(a) : "x"(b), "x"(c));
    return a;
  }
#endif
  return std::fma(a, b, -c);
}
}  // namespace shardsim::detail

#ifndef QD_FMS
#define QD_FMS(a, b, c) ::shardsim::detail::fused_multiply_subtract((a), (b), (c))
#endif

#include <qd/dd_real.h>
#include <qd/qd_real.h>

#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/narrow.hpp"
#include "core/scalar.hpp"

namespace shardsim {

template <typename R>
class Expansion;

// erf, which QD lacks: qd.cpp, instantiated for dd_real and qd_real.
template <typename R>
Expansion<R> expansion_erf(const Expansion<R>& x);

namespace detail {
template <typename R>
struct ExpansionOps;
template <>
struct ExpansionOps<dd_real> {
  static constexpr int terms = 2;
  static constexpr unsigned bits = 106;
  static constexpr const char* name = "dd";
  static dd_real add(const dd_real& a, const dd_real& b) { return dd_real::ieee_add(a, b); }
  static dd_real mul(const dd_real& a, const dd_real& b) { return a * b; }
  static dd_real div(const dd_real& a, const dd_real& b) { return dd_real::accurate_div(a, b); }
};
template <>
struct ExpansionOps<qd_real> {
  static constexpr int terms = 4;
  static constexpr unsigned bits = 212;
  static constexpr const char* name = "qd";
  static qd_real add(const qd_real& a, const qd_real& b) { return qd_real::ieee_add(a, b); }
  static qd_real mul(const qd_real& a, const qd_real& b) { return qd_real::accurate_mul(a, b); }
  static qd_real div(const qd_real& a, const qd_real& b) { return qd_real::accurate_div(a, b); }
};
}  // namespace detail

template <typename R>
class Expansion {
  using Ops = detail::ExpansionOps<R>;

 public:
  static constexpr int kTerms = Ops::terms;
  static constexpr unsigned kBits = Ops::bits;
  using Raw = R;  // dd_real or qd_real

  Expansion() = default;
  // From any arithmetic value through double: exact for floats, doubles and integers below 2^53.
  template <typename A>
  requires std::is_arithmetic_v<A> Expansion(A value)  // NOLINT: implicit, as Mp
      : r_(static_cast<double>(value)) {}
  explicit Expansion(const R& r) : r_(r) {}

  // Correctly rounded (round to nearest even) from the whole sum, not from x0 alone (qd.cpp).
  explicit operator double() const;
  explicit operator float() const;

  const R& raw() const { return r_; }
  double term(int i) const { return r_.x[i]; }

  friend Expansion operator+(const Expansion& a, const Expansion& b) {
    return checked(Ops::add(a.r_, b.r_), a.lead() + b.lead());
  }
  friend Expansion operator-(const Expansion& a, const Expansion& b) {
    return checked(Ops::add(a.r_, -b.r_), a.lead() - b.lead());
  }
  friend Expansion operator*(const Expansion& a, const Expansion& b) {
    return checked(Ops::mul(a.r_, b.r_), a.lead() * b.lead());
  }
  friend Expansion operator/(const Expansion& a, const Expansion& b) {
    if (b.lead() == 0 || !b.finite()) return Expansion(R(a.lead() / b.lead()));
    return checked(Ops::div(a.r_, b.r_), a.lead() / b.lead());
  }
  friend Expansion operator-(const Expansion& a) { return Expansion(-a.r_); }
  Expansion& operator+=(const Expansion& b) { return *this = *this + b; }
  Expansion& operator-=(const Expansion& b) { return *this = *this - b; }
  Expansion& operator*=(const Expansion& b) { return *this = *this * b; }
  Expansion& operator/=(const Expansion& b) { return *this = *this / b; }

  // Lexicographic on the renormalized terms, which orders the sums; NaN compares false.
  friend bool operator==(const Expansion& a, const Expansion& b) { return a.r_ == b.r_; }
  friend bool operator!=(const Expansion& a, const Expansion& b) { return !(a.r_ == b.r_); }
  friend bool operator<(const Expansion& a, const Expansion& b) { return a.r_ < b.r_; }
  friend bool operator>(const Expansion& a, const Expansion& b) { return a.r_ > b.r_; }
  friend bool operator<=(const Expansion& a, const Expansion& b) { return a.r_ <= b.r_; }
  friend bool operator>=(const Expansion& a, const Expansion& b) { return a.r_ >= b.r_; }

  // Functions, found by ADL as for Mp (`using std::exp; exp(x)`).
  friend Expansion sqrt(const Expansion& a) {
    if (a.lead() > 0 && a.finite()) return Expansion(::sqrt(a.r_));
    return Expansion(R(std::sqrt(a.lead())));  // 0, -0, +inf, NaN; negative -> NaN
  }
  friend Expansion exp(const Expansion& a) {
    if (std::isnan(a.lead())) return a;
    if (a.lead() < -746) return Expansion(0.0);  // below half the least subnormal
    if (a.lead() > 709.78) return Expansion(std::numeric_limits<double>::infinity());
    return Expansion(::exp(a.r_));
  }
  friend Expansion log(const Expansion& a) {
    if (a.lead() > 0 && a.finite()) return Expansion(::log(a.r_));
    return Expansion(R(std::log(a.lead())));  // 0 -> -inf, negative -> NaN, +inf
  }
  friend Expansion tanh(const Expansion& a) {
    // tanh|x| = 1 - 2 e^(-2|x|) / (1 + e^(-2|x|)); past |x| = 300 the last term is below
    // 2^-1700 relative, and QD's exp(|x|) would overflow past 709.
    if (!a.finite()) return Expansion(R(std::tanh(a.lead())));
    if (std::fabs(a.lead()) > 300) {
      const Expansion t = Expansion(1) - Expansion(2) * exp(Expansion(-2) * abs(a));
      return a.lead() < 0 ? -t : t;
    }
    return Expansion(::tanh(a.r_));
  }
  friend Expansion erf(const Expansion& a) { return expansion_erf(a); }
  friend Expansion sin(const Expansion& a) {
    return a.finite() ? Expansion(::sin(a.r_)) : Expansion(R(std::sin(a.lead())));
  }
  friend Expansion cos(const Expansion& a) {
    return a.finite() ? Expansion(::cos(a.r_)) : Expansion(R(std::cos(a.lead())));
  }
  friend Expansion acos(const Expansion& a) {
    if (a >= Expansion(-1) && a <= Expansion(1)) return Expansion(::acos(a.r_));
    return Expansion(std::numeric_limits<double>::quiet_NaN());
  }
  // a^b = exp(b log a) for finite a > 0; otherwise the double pow of the leading terms.
  friend Expansion pow(const Expansion& a, const Expansion& b) {
    if (a.lead() > 0 && a.finite() && b.finite()) return exp(b * log(a));
    return Expansion(R(std::pow(a.lead(), b.lead())));
  }
  friend Expansion abs(const Expansion& a) { return std::signbit(a.lead()) ? -a : a; }
  friend Expansion fabs(const Expansion& a) { return abs(a); }
  friend bool isnan(const Expansion& a) { return a.r_.isnan(); }
  friend bool isinf(const Expansion& a) { return std::isinf(a.lead()); }
  friend bool isfinite(const Expansion& a) { return a.finite(); }
  friend bool signbit(const Expansion& a) { return std::signbit(a.lead()); }

 private:
  double lead() const { return r_.x[0]; }
  bool finite() const {
    for (int i = 0; i < kTerms; ++i) {
      if (!std::isfinite(r_.x[i])) return false;
    }
    return true;
  }
  // QD's result, or the leading terms' IEEE result where an operand or the result is not finite,
  // or where the result is zero: QD's renormalization adds +0 terms and so loses the sign of a
  // zero (-0 * 1 would be +0); the leading terms' IEEE result has the IEEE sign (an exact zero
  // sum of nonzero expansions has a.x0 = -b.x0, so x0 + x0' is +0 as IEEE says).
  static Expansion checked(const R& r, double leading) {
    Expansion out(r);
    if (!out.finite() || r.x[0] == 0) out = Expansion(R(leading));
    return out;
  }

  R r_;
};

using Dd = Expansion<dd_real>;
using Qd = Expansion<qd_real>;

// v[i] = exp(v[i]) for i < n with the bits of exp above (QD's exp), four values at a time in
// vector lanes that run QD's exp operation for operation (qd_exp.cpp); the kernels' softmax rows
// call it. Overloads the generic loop in scalar.hpp.
void exp_each(Qd* v, std::int64_t n);
// Whether exp_each runs its lanes with the instruction set in use (lane_isa.hpp): false only if
// they disagreed with the linked libqd's exp on the self-check at first use, in which case
// exp_each loops over the scalar exp.
bool exp_each_uses_lanes();
namespace detail {
extern const qd_real kExpInverseFactorial[9];  // QD's exp's Taylor coefficients (qd_exp.cpp)
}  // namespace detail

// Correct rounding, done once from the whole sum (round to nearest even): RN(x0 + x1 + x2 + x3).
// f32 and the narrow formats go through a double rounded to odd, which has 53 >= p + 2 bits, so
// rounding it again gives the correctly rounded result (as round_to_narrow(Mp) in mp.hpp).
template <typename R>
double round_to_f64(const Expansion<R>& value);
template <typename R>
float round_to_f32(const Expansion<R>& value);
template <typename R>
std::uint16_t round_to_narrow(const Expansion<R>& value, NarrowFormat format);
// The sum rounded to a double by round-to-odd: toward zero, then the last bit set when inexact.
template <typename R>
double round_to_odd_f64(const Expansion<R>& value);

// Distance in units of the last place of `b` at the type's bits: |a - b| / 2^(e(b) + 1 - bits),
// with e(b) the exponent of b's leading term. NaN on either side gives +inf.
template <typename R>
double ulp_distance_expansion(const Expansion<R>& a, const Expansion<R>& b);

template <typename R>
inline Expansion<R>::operator double() const {
  return round_to_f64<R>(*this);
}
template <typename R>
inline Expansion<R>::operator float() const {
  return round_to_f32<R>(*this);
}

template <typename R>
struct ScalarTraits<Expansion<R>> {
  static constexpr const char* name = detail::ExpansionOps<R>::name;
  static double to_double(const Expansion<R>& v) { return round_to_f64<R>(v); }
  static double ulp(const Expansion<R>& a, const Expansion<R>& b) {
    return ulp_distance_expansion<R>(a, b);
  }
  // The same terms and the same sign of zero. (Two different term lists could in principle sum
  // to the same value; the same operations in the same order give the same terms.)
  static bool identical(const Expansion<R>& a, const Expansion<R>& b) {
    return !isnan(a) && a == b && signbit(a) == signbit(b);
  }
};

}  // namespace shardsim

template <typename R>
struct std::numeric_limits<shardsim::Expansion<R>> {
  // Complete enough for generic code that inspects it (Boost.Multiprecision's conversion traits
  // weigh Mp's converting constructor wherever mp.hpp is visible): a binary floating type with
  // double's exponent range and the expansion's significand bits.
  static constexpr bool is_specialized = true;
  static constexpr bool is_signed = true;
  static constexpr bool is_integer = false;
  static constexpr bool is_exact = false;
  static constexpr int radix = 2;
  static constexpr int digits = static_cast<int>(shardsim::Expansion<R>::kBits);
  static constexpr int digits10 = digits * 301 / 1000;
  static constexpr int min_exponent = std::numeric_limits<double>::min_exponent;
  static constexpr int max_exponent = std::numeric_limits<double>::max_exponent;
  static constexpr bool has_infinity = true;
  static constexpr bool has_quiet_NaN = true;
  static shardsim::Expansion<R> infinity() { return std::numeric_limits<double>::infinity(); }
  static shardsim::Expansion<R> quiet_NaN() { return std::numeric_limits<double>::quiet_NaN(); }
};
