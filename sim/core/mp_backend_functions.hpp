// Boost.Multiprecision's elementary functions for MpBackend (mp_backend.hpp): each the MPFR
// function Boost's mpfr_float_backend calls (boost/multiprecision/mpfr.hpp, Boost 1.81), round to
// nearest, so that none falls back to Boost's generic series (which round differently).
#pragma once

#include <type_traits>

#include "core/mp_backend_ops.hpp"

namespace shardsim {

// One-argument MPFR functions with a rounding mode: r = f(a).
#define SHARDSIM_MP_UNARY(name, mpfr_function)                                                 \
  inline void name(MpBackend& r, const MpBackend& a) {                                         \
    mp_detail::apply(r, a, [](mpfr_ptr x, mpfr_srcptr p) { mpfr_function(x, p, MPFR_RNDN); }); \
  }
SHARDSIM_MP_UNARY(eval_sqrt, mpfr_sqrt)
SHARDSIM_MP_UNARY(eval_abs, mpfr_abs)
SHARDSIM_MP_UNARY(eval_fabs, mpfr_abs)
SHARDSIM_MP_UNARY(eval_exp, mpfr_exp)
SHARDSIM_MP_UNARY(eval_exp2, mpfr_exp2)
SHARDSIM_MP_UNARY(eval_log, mpfr_log)
SHARDSIM_MP_UNARY(eval_log10, mpfr_log10)
SHARDSIM_MP_UNARY(eval_log2, mpfr_log2)
SHARDSIM_MP_UNARY(eval_sin, mpfr_sin)
SHARDSIM_MP_UNARY(eval_cos, mpfr_cos)
SHARDSIM_MP_UNARY(eval_tan, mpfr_tan)
SHARDSIM_MP_UNARY(eval_asin, mpfr_asin)
SHARDSIM_MP_UNARY(eval_acos, mpfr_acos)
SHARDSIM_MP_UNARY(eval_atan, mpfr_atan)
SHARDSIM_MP_UNARY(eval_sinh, mpfr_sinh)
SHARDSIM_MP_UNARY(eval_cosh, mpfr_cosh)
SHARDSIM_MP_UNARY(eval_tanh, mpfr_tanh)
#undef SHARDSIM_MP_UNARY

// Rounding to an integer (MPFR's have no rounding mode).
inline void eval_ceil(MpBackend& r, const MpBackend& a) {
  mp_detail::apply(r, a, [](mpfr_ptr x, mpfr_srcptr p) { mpfr_ceil(x, p); });
}
inline void eval_floor(MpBackend& r, const MpBackend& a) {
  mp_detail::apply(r, a, [](mpfr_ptr x, mpfr_srcptr p) { mpfr_floor(x, p); });
}
inline void eval_trunc(MpBackend& r, const MpBackend& a) {
  mp_detail::apply(r, a, [](mpfr_ptr x, mpfr_srcptr p) { mpfr_trunc(x, p); });
}

inline void eval_ldexp(MpBackend& r, const MpBackend& a, long e) {
  if (e == 0) {
    r = a;
    return;
  }
  mp_detail::apply(r, a, [&](mpfr_ptr x, mpfr_srcptr p) {
    if (e > 0) {
      mpfr_mul_2exp(x, p, static_cast<unsigned long>(e), MPFR_RNDN);
    } else {
      mpfr_div_2exp(x, p, mp_detail::unsigned_abs(e), MPFR_RNDN);
    }
  });
}
inline void eval_frexp(MpBackend& r, const MpBackend& a, long* e) {
  if (a.is_zero()) {
    *e = 0;
    r = a;
    return;
  }
  const long v = mpfr_get_exp(a.data().get());
  *e = v;
  if (v != 0) {
    eval_ldexp(r, a, -v);
  } else {
    r = a;
  }
}
inline void eval_frexp(MpBackend& r, const MpBackend& a, int* e) {
  long wide = 0;
  eval_frexp(r, a, &wide);
  *e = static_cast<int>(wide);
}

// pow: Boost returns 0 ^ (odd positive integer) as the base itself (a signed zero).
inline void eval_pow(MpBackend& r, const MpBackend& b, const MpBackend& e) {
  mp_detail::apply(r, b, e, [](mpfr_ptr x, mpfr_srcptr base, mpfr_srcptr power) {
    if (mpfr_zero_p(base) && mpfr_integer_p(power) && mpfr_signbit(power) == 0 &&
        mpfr_fits_ulong_p(power, MPFR_RNDN) && (mpfr_get_ui(power, MPFR_RNDN) & 1)) {
      mpfr_set(x, base, MPFR_RNDN);
    } else {
      mpfr_pow(x, base, power, MPFR_RNDN);
    }
  });
}
template <typename Integer>
std::enable_if_t<std::is_integral_v<Integer> && sizeof(Integer) <= sizeof(long)> eval_pow(
    MpBackend& r, const MpBackend& b, const Integer& e) {
  mp_detail::apply(r, b, [&](mpfr_ptr x, mpfr_srcptr base) {
    if constexpr (std::is_signed_v<Integer>) {
      mpfr_pow_si(x, base, static_cast<long>(e), MPFR_RNDN);
    } else {
      mpfr_pow_ui(x, base, static_cast<unsigned long>(e), MPFR_RNDN);
    }
  });
}

inline void eval_atan2(MpBackend& r, const MpBackend& a, const MpBackend& b) {
  mp_detail::apply(
      r, a, b, [](mpfr_ptr x, mpfr_srcptr p, mpfr_srcptr q) { mpfr_atan2(x, p, q, MPFR_RNDN); });
}
inline void eval_fmod(MpBackend& r, const MpBackend& a, const MpBackend& b) {
  mp_detail::apply(r, a, b,
                   [](mpfr_ptr x, mpfr_srcptr p, mpfr_srcptr q) { mpfr_fmod(x, p, q, MPFR_RNDN); });
}
inline void eval_remainder(MpBackend& r, const MpBackend& a, const MpBackend& b) {
  mp_detail::apply(r, a, b, [](mpfr_ptr x, mpfr_srcptr p, mpfr_srcptr q) {
    mpfr_remainder(x, p, q, MPFR_RNDN);
  });
}
inline void eval_remquo(MpBackend& r, const MpBackend& a, const MpBackend& b, int* quotient) {
  long q = 0;
  mp_detail::apply(r, a, b, [&](mpfr_ptr x, mpfr_srcptr p, mpfr_srcptr d) {
    mpfr_remquo(x, &q, p, d, MPFR_RNDN);
  });
  if (quotient) *quotient = static_cast<int>(q);
}
// The fractional part into r, the integral part into *integral (when given).
inline void eval_modf(MpBackend& r, const MpBackend& a, MpBackend* integral) {
  MpBackend scratch;
  MpBackend& whole = integral ? *integral : scratch;
  const MpBackend copy = a;  // a may be r or *integral
  MpfrOut w(whole);
  mp_detail::apply(r, copy, [&](mpfr_ptr x, mpfr_srcptr p) { mpfr_modf(w, x, p, MPFR_RNDN); });
}

// fma: r = a * b + r, r = a * b + c; fms as Boost: r = -(a * b - r), r = a * b - c.
inline void eval_multiply_add(MpBackend& r, const MpBackend& a, const MpBackend& b,
                              const MpBackend& c) {
  mp_detail::apply(r, a, b, c, [](mpfr_ptr x, mpfr_srcptr p, mpfr_srcptr q, mpfr_srcptr s) {
    mpfr_fma(x, p, q, s, MPFR_RNDN);
  });
}
inline void eval_multiply_add(MpBackend& r, const MpBackend& a, const MpBackend& b) {
  eval_multiply_add(r, a, b, r);
}
inline void eval_multiply_subtract(MpBackend& r, const MpBackend& a, const MpBackend& b,
                                   const MpBackend& c) {
  mp_detail::apply(r, a, b, c, [](mpfr_ptr x, mpfr_srcptr p, mpfr_srcptr q, mpfr_srcptr s) {
    mpfr_fms(x, p, q, s, MPFR_RNDN);
  });
}
inline void eval_multiply_subtract(MpBackend& r, const MpBackend& a, const MpBackend& b) {
  eval_multiply_subtract(r, a, b, r);
  r.negate();
}

}  // namespace shardsim
