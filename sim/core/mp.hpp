// The multiprecision scalar: Boost.Multiprecision's front end over MPFR, precision chosen at run
// time. The storage is shardsim's MpBackend (mp_backend.hpp: 56 bytes, limbs inline up to 320
// bits), which makes the MPFR call Boost's mpfr_float_backend makes for every operation, so values
// are the bits Boost's backend gives.
//
// Only translation units that instantiate kernels for Mp include this header (the *_mp.cpp files,
// the Mp units CMakeLists.txt generates for every kernel, and tests), so the rest of the
// build never sees MPFR.
//
// Precision: Boost's variable-precision interface counts decimal digits, and shardsim keeps its
// mapping: the significand of an mp<bits> run is the smallest Boost precision with at least `bits`
// bits: mp256 carries 257 bits, mp128 carries 128. mp_significand_bits() reports what is in force
// and the report prints it.
#pragma once

#include <boost/multiprecision/number.hpp>
#include <climits>
#include <cstdint>
#include <limits>
#include <utility>

#include "core/mp_backend.hpp"
#include "core/mp_backend_functions.hpp"
#include "core/mp_backend_ops.hpp"
#include "core/narrow.hpp"
#include "core/scalar.hpp"

namespace boost::multiprecision {
template <>
struct number_category<shardsim::MpBackend>
    : public std::integral_constant<int, number_kind_floating_point> {};
}  // namespace boost::multiprecision

namespace shardsim {

using Mp = boost::multiprecision::number<MpBackend, boost::multiprecision::et_off>;

// Makes new Mp values on this thread (and on threads that have not made one yet) carry at least
// `bits` significand bits. Returns the significand bits actually in force. REQUIRES: bits >= 2.
unsigned set_mp_precision(unsigned bits);
unsigned mp_significand_bits();
// This thread's precision for new values, exactly (parallel_for hands it to its workers).
inline long mp_thread_bits() { return mp_detail::default_bits(); }
inline void set_mp_thread_bits(long bits) { mp_detail::set_thread_default_bits(bits); }

// The functions Boost provides for its mpfr numbers outside the backend interface (its
// boost::multiprecision generic versions go through Boost.Math's series): MPFR's, rounded to
// nearest, the result as wide as the widest of the thread's default and the argument.
#define SHARDSIM_MP_FUNCTION(name, mpfr_function)                                        \
  inline Mp name(const Mp& a) {                                                          \
    Mp r;                                                                                \
    mp_detail::apply(r.backend(), a.backend(),                                           \
                     [](mpfr_ptr x, mpfr_srcptr p) { mpfr_function(x, p, MPFR_RNDN); }); \
    return r;                                                                            \
  }
SHARDSIM_MP_FUNCTION(erf, mpfr_erf)
SHARDSIM_MP_FUNCTION(erfc, mpfr_erfc)
SHARDSIM_MP_FUNCTION(expm1, mpfr_expm1)
SHARDSIM_MP_FUNCTION(log1p, mpfr_log1p)
SHARDSIM_MP_FUNCTION(asinh, mpfr_asinh)
SHARDSIM_MP_FUNCTION(acosh, mpfr_acosh)
SHARDSIM_MP_FUNCTION(atanh, mpfr_atanh)
SHARDSIM_MP_FUNCTION(cbrt, mpfr_cbrt)
SHARDSIM_MP_FUNCTION(tgamma, mpfr_gamma)
#undef SHARDSIM_MP_FUNCTION

// Correct rounding, done once: mp -> f32 goes directly (mpfr_get_flt), never through f64, so no
// double rounding can occur. Round-to-nearest-even.
float round_to_f32(const Mp& value);
double round_to_f64(const Mp& value);
// mp -> bf16/f16 bits, rounded once and correctly (RNE): through a double rounded to odd (toward
// zero, then the last bit set when inexact), which has 53 >= p + 2 bits, so rounding it to the
// narrow format gives the correctly rounded result (S. Boldo, G. Melquiond, "Emulation of FMA
// and correctly rounded sums: proved algorithms using rounding to odd", IEEE TC 2008).
std::uint16_t round_to_narrow(const Mp& value, NarrowFormat format);

// Distance in units of the last place of `b` at the current mp precision: |a - b| / ulp(b).
// NaN on either side gives +inf. Used for the report's max_ulp at mp levels.
double ulp_distance_mp(const Mp& a, const Mp& b);

template <>
struct ScalarTraits<Mp> {
  static constexpr const char* name = "mp";
  static double to_double(const Mp& v) { return round_to_f64(v); }
  static double ulp(const Mp& a, const Mp& b) { return ulp_distance_mp(a, b); }
  static bool identical(const Mp& a, const Mp& b) {
    return !isnan(a) && a == b && signbit(a) == signbit(b);
  }
};

// The in-place arithmetic of scalar.hpp on MPFR storage: one correctly rounded operation (round to
// nearest even) at out's precision, which for values made at the run's precision is that
// precision, the same result Boost's operator gives. No allocation.
namespace mp_detail {
// out = f(a, b) at out's precision (no widening), aliases sharing one view.
template <typename F>
[[gnu::always_inline]] inline void at_out_precision(Mp& out, const Mp& a, const Mp& b, F f) {
  MpBackend& r = out.backend();
  __mpfr_struct rv = r.view();
  __mpfr_struct av;
  __mpfr_struct bv;
  mpfr_srcptr ap = &rv;
  mpfr_srcptr bp = &rv;
  if (&a.backend() != &r) {
    av = a.backend().view();
    ap = &av;
  }
  if (&b == &a) {
    bp = ap;
  } else if (&b.backend() != &r) {
    bv = b.backend().view();
    bp = &bv;
  }
  f(&rv, ap, bp);
  r.absorb(rv);
}
}  // namespace mp_detail

template <>
inline void add_into<Mp>(Mp& out, const Mp& a, const Mp& b) {
  mp_detail::at_out_precision(
      out, a, b, [](mpfr_ptr x, mpfr_srcptr p, mpfr_srcptr q) { mpfr_add(x, p, q, MPFR_RNDN); });
}
template <>
inline void sub_into<Mp>(Mp& out, const Mp& a, const Mp& b) {
  mp_detail::at_out_precision(
      out, a, b, [](mpfr_ptr x, mpfr_srcptr p, mpfr_srcptr q) { mpfr_sub(x, p, q, MPFR_RNDN); });
}
template <>
inline void mul_into<Mp>(Mp& out, const Mp& a, const Mp& b) {
  mp_detail::at_out_precision(
      out, a, b, [](mpfr_ptr x, mpfr_srcptr p, mpfr_srcptr q) { mpfr_mul(x, p, q, MPFR_RNDN); });
}

}  // namespace shardsim

namespace boost::multiprecision {

// IEEE 754 subtraction for an rvalue right operand. Boost's et_off operator-(const number& a,
// number&& b) reuses b's storage by computing -(b - a) (boost/multiprecision/detail/
// no_et_ops.hpp): when a == b that is -0, where a - b under round to nearest is +0 (as at f32 and
// f64, and as MPFR's mpfr_sub gives). This exact-type overload, preferred by overload resolution
// over Boost's template, subtracts in order into b's storage, at b's precision as Boost does: the
// same value, and the sign of an exact zero that IEEE arithmetic gives.
inline shardsim::Mp operator-(const shardsim::Mp& a, shardsim::Mp&& b) {
  shardsim::mp_detail::at_out_precision(
      b, a, b, [](mpfr_ptr x, mpfr_srcptr p, mpfr_srcptr q) { mpfr_sub(x, p, q, MPFR_RNDN); });
  return std::move(b);
}

}  // namespace boost::multiprecision

// Boost's limits for mpfr_float (boost/multiprecision/mpfr.hpp), for Mp: the generic
// numeric_limits of a number gives 0 for infinity() and quiet_NaN().
template <>
class std::numeric_limits<shardsim::Mp> {
  using Mp = shardsim::Mp;

 public:
  static constexpr bool is_specialized = false;
  static Mp(min)() { return ldexp(Mp(0.5), mpfr_get_emin()); }
  static Mp(max)() { return ldexp(Mp(0.5), mpfr_get_emax()); }
  static Mp lowest() { return -(max)(); }
  static constexpr int digits = INT_MAX;
  static constexpr int digits10 = INT_MAX;
  static constexpr int max_digits10 = INT_MAX;
  static constexpr bool is_signed = true;
  static constexpr bool is_integer = false;
  static constexpr bool is_exact = false;
  static constexpr int radix = 2;
  static Mp epsilon() { return ldexp(Mp(1), 1 - shardsim::mp_thread_bits()); }
  static Mp round_error() { return Mp(0.5); }
  static constexpr long min_exponent = MPFR_EMIN_DEFAULT;
  static constexpr long min_exponent10 = (MPFR_EMIN_DEFAULT / 1000) * 301L;
  static constexpr long max_exponent = MPFR_EMAX_DEFAULT;
  static constexpr long max_exponent10 = (MPFR_EMAX_DEFAULT / 1000) * 301L;
  static constexpr bool has_infinity = true;
  static constexpr bool has_quiet_NaN = true;
  static constexpr bool has_signaling_NaN = false;
  static constexpr float_denorm_style has_denorm = denorm_absent;
  static constexpr bool has_denorm_loss = false;
  static Mp infinity() {
    Mp v;
    mpfr_set_inf(shardsim::MpfrOut(v.backend()), 1);
    return v;
  }
  static Mp quiet_NaN() {
    Mp v;
    mpfr_set_nan(shardsim::MpfrOut(v.backend()));
    return v;
  }
  static Mp signaling_NaN() { return Mp(0); }
  static Mp denorm_min() { return Mp(0); }
  static constexpr bool is_iec559 = false;
  static constexpr bool is_bounded = true;
  static constexpr bool is_modulo = false;
  static constexpr bool traps = false;
  static constexpr bool tinyness_before = false;
  static constexpr float_round_style round_style = round_toward_zero;
};
