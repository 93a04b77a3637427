#include "core/mp.hpp"

#include <bit>
#include <cmath>
#include <limits>

#include "core/error.hpp"

namespace shardsim {

unsigned set_mp_precision(unsigned bits) {
  SHARDSIM_ASSERT(bits >= 2, "mp precision needs at least 2 bits");
  // Boost counts decimal digits; digits10 -> bits is d*1000/301 rounded up plus one guard bit.
  // Pick the smallest digits10 whose binary precision reaches `bits`.
  unsigned digits10 = 1;
  while (boost::multiprecision::detail::digits10_2_2(digits10) < bits) ++digits10;
  const auto carried =
      static_cast<mpfr_prec_t>(boost::multiprecision::detail::digits10_2_2(digits10));
  mp_detail::set_thread_default_bits(carried);
  mp_detail::set_process_default_bits(carried);
  return mp_significand_bits();
}

unsigned mp_significand_bits() { return static_cast<unsigned>(mp_detail::default_bits()); }

float round_to_f32(const Mp& value) { return mpfr_get_flt(value.backend().data(), MPFR_RNDN); }

double round_to_f64(const Mp& value) { return mpfr_get_d(value.backend().data(), MPFR_RNDN); }

std::uint16_t round_to_narrow(const Mp& value, NarrowFormat format) {
  const auto view = value.backend().data();  // the mpfr_t lives as long as `view`
  const mpfr_srcptr x = view;
  double odd = mpfr_get_d(x, MPFR_RNDZ);  // NaN and the infinities convert exactly
  if (mpfr_number_p(x) && mpfr_cmp_d(x, odd) != 0) {
    odd = std::bit_cast<double>(std::bit_cast<std::uint64_t>(odd) | 1u);
  }
  return narrow_from_double(format, odd);
}

double ulp_distance_mp(const Mp& a, const Mp& b) {
  if (isnan(a) || isnan(b)) return std::numeric_limits<double>::infinity();
  if (a == b) return 0.0;
  const Mp diff = abs(a - b);
  if (b == 0) return std::numeric_limits<double>::infinity();
  // ulp(b) = 2^(exponent(b) - precision), with MPFR's exponent convention 0.5 <= |m| < 1.
  const long exponent = mpfr_get_exp(b.backend().data());
  const long precision = static_cast<long>(mpfr_get_prec(b.backend().data()));
  Mp scaled = diff;
  mpfr_mul_2si(MpfrOut(scaled.backend()), diff.backend().data(), precision - exponent, MPFR_RNDN);
  return round_to_f64(scaled);
}

}  // namespace shardsim
