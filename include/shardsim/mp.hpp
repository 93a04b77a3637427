// The multiprecision scalar: Boost.Multiprecision over MPFR, precision chosen at run time.
//
// Only translation units that instantiate kernels for Mp include this header (the *_mp.cpp files,
// and tests), so the rest of the build never sees MPFR.
//
// Precision: Boost's variable-precision interface counts decimal digits, so the significand of an
// mp<bits> run is the smallest Boost precision with at least `bits` bits: mp256 carries 257 bits,
// mp128 carries 128. mp_significand_bits() reports what is in force and the report prints it.
#pragma once

#include <boost/multiprecision/mpfr.hpp>
#include <cstdint>
#include <utility>

#include "shardsim/narrow.hpp"
#include "shardsim/scalar.hpp"

namespace shardsim {

using Mp = boost::multiprecision::number<boost::multiprecision::mpfr_float_backend<0>,
                                         boost::multiprecision::et_off>;

// Makes new Mp values on this thread carry at least `bits` significand bits.
// Returns the significand bits actually in force. REQUIRES: bits >= 2.
unsigned set_mp_precision(unsigned bits);
unsigned mp_significand_bits();

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
template <>
inline void add_into<Mp>(Mp& out, const Mp& a, const Mp& b) {
  mpfr_add(out.backend().data(), a.backend().data(), b.backend().data(), MPFR_RNDN);
}
template <>
inline void sub_into<Mp>(Mp& out, const Mp& a, const Mp& b) {
  mpfr_sub(out.backend().data(), a.backend().data(), b.backend().data(), MPFR_RNDN);
}
template <>
inline void mul_into<Mp>(Mp& out, const Mp& a, const Mp& b) {
  mpfr_mul(out.backend().data(), a.backend().data(), b.backend().data(), MPFR_RNDN);
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
  mpfr_sub(b.backend().data(), a.backend().data(), b.backend().data(), MPFR_RNDN);
  return std::move(b);
}

}  // namespace boost::multiprecision
