// The dd and qd scalars (qd.hpp): correct rounding of an expansion to f64, f32 and the narrow
// formats, the ULP distance, and erf.
#include "core/qd.hpp"

#include <mpfr.h>

#include <array>
#include <bit>
#include <climits>

namespace shardsim {

namespace detail {
// __builtin_cpu_init first: this initializer may run before the one that sets up
// __builtin_cpu_supports. An initializer elsewhere that runs before this one sees false and takes
// glibc's fma, which gives the same bits.
const bool kCpuHasFma = [] {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("fma") != 0;
#else
  return false;
#endif
}();
}  // namespace detail

namespace {

using Terms = std::array<double, 4>;

template <typename R>
Terms terms_of(const Expansion<R>& v) {
  Terms x{0, 0, 0, 0};
  for (int i = 0; i < Expansion<R>::kTerms; ++i) x[static_cast<std::size_t>(i)] = v.term(i);
  return x;
}

// Half a unit in the last place of a nonzero finite double.
double half_ulp(double d) { return std::ldexp(1.0, std::max(std::ilogb(d), -1022) - 53); }

// The property the fast roundings rely on: every nonzero term after the first is at most half an
// ulp of the term before it, and the leading sum stays far from the subnormal range and from
// overflow. QD's renormalization gives the first almost always; otherwise round through MPFR.
bool fast_path(const Terms& x) {
  if (x[0] == 0) return x[1] == 0 && x[2] == 0 && x[3] == 0;
  if (!(std::fabs(x[0]) >= 0x1p-960 && std::fabs(x[0]) <= 0x1p1000)) return false;
  for (std::size_t i = 0; i + 1 < x.size(); ++i) {
    if (x[i + 1] == 0) continue;
    if (x[i] == 0 || !(std::fabs(x[i + 1]) <= half_ulp(x[i]))) return false;
  }
  return true;
}

// The exact sum rounded once to 53 bits by MPFR (mpfr_sum rounds the exact sum), toward nearest
// even or toward zero; `inexact` tells whether the rounding changed the value.
double mpfr_rounded_sum(const Terms& x, mpfr_rnd_t mode, bool& inexact) {
  std::array<mpfr_t, 4> t;
  std::array<mpfr_ptr, 4> p;
  mpfr_t sum;
  mpfr_init2(sum, 53);
  for (std::size_t i = 0; i < 4; ++i) {
    mpfr_init2(t[i], 53);
    mpfr_set_d(t[i], x[i], MPFR_RNDN);  // exact
    p[i] = t[i];
  }
  inexact = mpfr_sum(sum, p.data(), 4, mode) != 0;
  const double out = mpfr_get_d(sum, MPFR_RNDN);  // exact: sum has 53 bits
  for (auto& v : t) mpfr_clear(v);
  mpfr_clear(sum);
  return out;
}

// The sum's value relative to s = RN(x0 + x1) (the fast path's facts, derived here):
//   x0 + x1 = s + e exactly (two_sum), and the tail x2 + x3 is smaller than ulp(x1) <= lsb(x1),
//   while e and the half gap d between s and its neighbour on e's side are multiples of lsb(x1)
//   (or e = 0). So the sum crosses the midpoint s + d only when x0 + x1 was itself the tie
//   (|e| = d) and the tail points the same way; and sign(sum - s) is sign(e), or sign(tail)
//   when e = 0.
struct Split {
  double s;
  double e;
  double tail_sign;  // +1, -1 or 0
};
Split split(const Terms& x) {
  const double s = x[0] + x[1];
  const double bb = s - x[0];
  const double e = (x[0] - (s - bb)) + (x[1] - bb);
  const double tail = x[2] != 0 ? x[2] : x[3];
  return {s, e, tail > 0 ? 1.0 : (tail < 0 ? -1.0 : 0.0)};
}

// A zero expansion keeps its sign: QD keeps it in the leading term (-0 = (-0, 0, 0, 0)), and
// summing the terms would give -0 + 0 = +0.
bool is_zero(const Terms& x) { return x[0] == 0 && x[1] == 0 && x[2] == 0 && x[3] == 0; }

double rn_terms(const Terms& x) {
  if (!std::isfinite(x[0]) || is_zero(x)) return x[0];
  bool inexact = false;
  if (!fast_path(x)) return mpfr_rounded_sum(x, MPFR_RNDN, inexact);
  const Split p = split(x);
  if (p.e == 0) return p.s;
  const double next = std::nextafter(p.s, p.e > 0 ? INFINITY : -INFINITY);
  const double half = (next - p.s) / 2;  // exact: neighbours, far from the subnormal range
  if (p.e == half && p.tail_sign != 0 && (p.tail_sign > 0) == (p.e > 0)) return next;
  return p.s;  // |e| < d, or the tie broken by the tail toward s, or an exact tie (RNE in s)
}

double ro_terms(const Terms& x) {
  if (!std::isfinite(x[0]) || is_zero(x)) return x[0];
  bool inexact = false;
  if (!fast_path(x)) {
    double z = mpfr_rounded_sum(x, MPFR_RNDZ, inexact);
    if (inexact) z = std::bit_cast<double>(std::bit_cast<std::uint64_t>(z) | 1u);
    return z;
  }
  const Split p = split(x);
  const double direction = p.e != 0 ? (p.e > 0 ? 1.0 : -1.0) : p.tail_sign;
  if (direction == 0) return p.s;  // exact
  // The sum lies strictly between s and its neighbour toward `direction`; one of them is odd.
  if (std::bit_cast<std::uint64_t>(p.s) & 1u) return p.s;
  return std::nextafter(p.s, direction > 0 ? INFINITY : -INFINITY);
}

}  // namespace

template <typename R>
double round_to_f64(const Expansion<R>& value) {
  return rn_terms(terms_of(value));
}
template <typename R>
double round_to_odd_f64(const Expansion<R>& value) {
  return ro_terms(terms_of(value));
}
template <typename R>
float round_to_f32(const Expansion<R>& value) {
  return static_cast<float>(round_to_odd_f64(value));  // 53 >= 24 + 2: one correct rounding
}
template <typename R>
std::uint16_t round_to_narrow(const Expansion<R>& value, NarrowFormat format) {
  return narrow_from_double(format, round_to_odd_f64(value));
}

template <typename R>
double ulp_distance_expansion(const Expansion<R>& a, const Expansion<R>& b) {
  if (isnan(a) || isnan(b)) return INFINITY;
  if (isinf(a) || isinf(b)) return a == b ? 0.0 : INFINITY;
  const double gap = round_to_f64(abs(a - b));
  if (gap == 0) return 0;
  if (b.term(0) == 0) return INFINITY;
  const int unit = std::ilogb(b.term(0)) + 1 - static_cast<int>(Expansion<R>::kBits);
  return std::ldexp(gap, -unit);
}

// erf(x) = 2/sqrt(pi) * x * exp(-x^2) * S(x),  S = sum_{n>=0} (2x^2)^n / (1 * 3 * ... * (2n+1))
// (Abramowitz & Stegun 7.1.6), for |x| < 13; erf(-x) = -erf(x); 1 beyond.
//
// Accuracy, with u = 2^-bits (2^-106 dd, 2^-212 qd) and c u the error of one QD operation
// (c <= 4 for the accurate * and /, IEEE +):
//   - every term is positive, so S has no cancellation: its relative error is at most the largest
//     relative error of the terms that matter plus one rounding per addition, N c u for N terms.
//   - term n is term n-1 times 2x^2 (one rounding, shared by all terms: n u in term n) divided by
//     2n+1 (one rounding): relative error <= 2 n c u. Terms decrease once n > x^2 - 1/2; the
//     series stops at the first n > 2x^2 with term < 2^-(bits+8) S, where each further term is at
//     most half the one before, so the truncated tail is below 2^-(bits+7) S. The terms that
//     carry S have n <= 2x^2, so the relative error of S is at most (4 x^2 + N) c u.
//   - exp(-x^2): x^2 is rounded once (relative u), which moves exp by x^2 u relative; QD's exp
//     adds c u.
//   - 2/sqrt(pi) (one division, one sqrt of QD's pi), x, and the products: 4 c u.
// Total: (5 x^2 + N + 6) c u. The terms at most halve past n = 2x^2 and stop after falling by
// 2^(bits + 8) from S's size, so N <= 2x^2 + bits + 9, and with x^2 < 169 (|x| < 13) the bound is
// (7 * 169 + bits + 15) * 4 u < 2^13 u relative: 2^-199 at qd, 2^-93 at dd. tests/qd_test.cpp
// measures it against MPFR at 320 bits on 8000+ points: the worst seen is
// 2^-207.7 at qd and 2^-97.9 at dd.
// For |x| >= 13, 1 - erf(x) = erfc(x) < erfc(13) < 2^-246 < u: 1 is within u of erf.
template <typename R>
Expansion<R> expansion_erf(const Expansion<R>& x) {
  using E = Expansion<R>;
  if (isnan(x) || x.term(0) == 0) return x;  // NaN, +0, -0
  const bool negative = signbit(x);
  const E a = abs(x);
  if (a.term(0) >= 13) return negative ? E(-1) : E(1);
  static const E two_over_sqrt_pi = E(2) / sqrt(E(R::_pi));
  const E square = a * a;
  const R ratio = (square + square).raw();  // 2x^2, exact doubling
  const double start_tail = 2 * square.term(0);
  const double cutoff = std::ldexp(1.0, -static_cast<int>(E::kBits) - 8);
  R term(1.0);
  R sum(1.0);
  for (int n = 1;; ++n) {
    term = detail::ExpansionOps<R>::mul(term, ratio) / static_cast<double>(2 * n + 1);
    sum = detail::ExpansionOps<R>::add(sum, term);
    if (n > start_tail && term.x[0] < cutoff * sum.x[0]) break;
  }
  const E result = two_over_sqrt_pi * a * exp(-square) * E(sum);
  return negative ? -result : result;
}

#define SHARDSIM_INSTANTIATE_EXPANSION(R)                                           \
  template double round_to_f64(const Expansion<R>&);                                \
  template double round_to_odd_f64(const Expansion<R>&);                            \
  template float round_to_f32(const Expansion<R>&);                                 \
  template std::uint16_t round_to_narrow(const Expansion<R>&, NarrowFormat);        \
  template double ulp_distance_expansion(const Expansion<R>&, const Expansion<R>&); \
  template Expansion<R> expansion_erf(const Expansion<R>&);

SHARDSIM_INSTANTIATE_EXPANSION(dd_real)
SHARDSIM_INSTANTIATE_EXPANSION(qd_real)

}  // namespace shardsim
