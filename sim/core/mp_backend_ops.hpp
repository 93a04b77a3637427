// Boost.Multiprecision's backend operations for MpBackend (mp_backend.hpp): arithmetic,
// comparison and conversion. Each makes the MPFR call that Boost's mpfr_float_backend makes for the
// same operation (boost/multiprecision/mpfr.hpp, Boost 1.81), down to which of mpfr_add_ui and
// mpfr_sub_ui an integer operand uses (they differ in the sign of an exact zero), so that Mp's
// results are the bits they were with Boost's backend. An operation Boost's backend leaves to its
// generic code (a double operand: made an MpBackend at the default precision, then the two-value
// form) is left to the same generic code here.
#pragma once

#include <algorithm>
#include <stdexcept>
#include <type_traits>

#include "core/mp_backend.hpp"

namespace shardsim {

namespace mp_detail {

inline unsigned long unsigned_abs(long i) {
  return i < 0 ? 0ul - static_cast<unsigned long>(i) : static_cast<unsigned long>(i);
}

// Runs f on MPFR views of r and its operands, r first made as wide as the widest operand (Boost's
// result precision: the thread's default, which r already has when the front end made it, or an
// operand's if wider). An operand that is r shares r's view.
// Inlined always: the views live in registers and the operation's cost is MPFR's alone.
template <typename F>
[[gnu::always_inline]] inline void apply(MpBackend& r, const MpBackend& a, F f) {
  r.raise_to(a.precision_bits());
  __mpfr_struct rv = r.view();
  __mpfr_struct av;
  mpfr_srcptr ap = &rv;
  if (&a != &r) {
    av = a.view();
    ap = &av;
  }
  f(&rv, ap);
  r.absorb(rv);
}

template <typename F>
[[gnu::always_inline]] inline void apply(MpBackend& r, const MpBackend& a, const MpBackend& b,
                                         F f) {
  r.raise_to(std::max(a.precision_bits(), b.precision_bits()));
  __mpfr_struct rv = r.view();
  __mpfr_struct av;
  __mpfr_struct bv;
  mpfr_srcptr ap = &rv;
  mpfr_srcptr bp = &rv;
  if (&a != &r) {
    av = a.view();
    ap = &av;
  }
  if (&b == &a) {
    bp = ap;
  } else if (&b != &r) {
    bv = b.view();
    bp = &bv;
  }
  f(&rv, ap, bp);
  r.absorb(rv);
}

template <typename F>
void apply(MpBackend& r, const MpBackend& a, const MpBackend& b, const MpBackend& c, F f) {
  r.raise_to(std::max({a.precision_bits(), b.precision_bits(), c.precision_bits()}));
  __mpfr_struct rv = r.view();
  __mpfr_struct v[3];
  const MpBackend* operands[3] = {&a, &b, &c};
  mpfr_srcptr p[3] = {&rv, &rv, &rv};
  for (int i = 0; i < 3; ++i) {
    if (operands[i] == &r) continue;
    p[i] = nullptr;
    for (int j = 0; j < i; ++j) {
      if (operands[j] == operands[i]) p[i] = p[j];
    }
    if (p[i] == nullptr) {
      v[i] = operands[i]->view();
      p[i] = &v[i];
    }
  }
  f(&rv, p[0], p[1], p[2]);
  r.absorb(rv);
}

// r = f(r): an in-place call on r alone.
template <typename F>
void apply_self(MpBackend& r, F f) {
  __mpfr_struct rv = r.view();
  f(&rv);
  r.absorb(rv);
}

}  // namespace mp_detail

// ---- arithmetic: r op= o
inline void eval_add(MpBackend& r, const MpBackend& o) {
  mp_detail::apply(r, r, o,
                   [](mpfr_ptr x, mpfr_srcptr a, mpfr_srcptr b) { mpfr_add(x, a, b, MPFR_RNDN); });
}
inline void eval_subtract(MpBackend& r, const MpBackend& o) {
  mp_detail::apply(r, r, o,
                   [](mpfr_ptr x, mpfr_srcptr a, mpfr_srcptr b) { mpfr_sub(x, a, b, MPFR_RNDN); });
}
inline void eval_multiply(MpBackend& r, const MpBackend& o) {
  mp_detail::apply(r, r, o, [&](mpfr_ptr x, mpfr_srcptr a, mpfr_srcptr b) {
    if (&o == &r) {
      mpfr_sqr(x, b, MPFR_RNDN);
    } else {
      mpfr_mul(x, a, b, MPFR_RNDN);
    }
  });
}
inline void eval_divide(MpBackend& r, const MpBackend& o) {
  mp_detail::apply(r, r, o,
                   [](mpfr_ptr x, mpfr_srcptr a, mpfr_srcptr b) { mpfr_div(x, a, b, MPFR_RNDN); });
}
// In place with a long: Boost adds or subtracts by i > 0, where its three-argument forms (below)
// choose by y < 0; they differ on 0 (sub_ui keeps -0, add_ui gives +0). The other in-place
// integer forms are the three-argument ones with r as the operand (after those).
inline void eval_add(MpBackend& r, long i) {  // Boost: i > 0 adds, else subtracts |i|
  mp_detail::apply_self(r, [&](mpfr_ptr x) {
    if (i > 0) {
      mpfr_add_ui(x, x, static_cast<unsigned long>(i), MPFR_RNDN);
    } else {
      mpfr_sub_ui(x, x, mp_detail::unsigned_abs(i), MPFR_RNDN);
    }
  });
}
inline void eval_subtract(MpBackend& r, long i) {
  mp_detail::apply_self(r, [&](mpfr_ptr x) {
    if (i > 0) {
      mpfr_sub_ui(x, x, static_cast<unsigned long>(i), MPFR_RNDN);
    } else {
      mpfr_add_ui(x, x, mp_detail::unsigned_abs(i), MPFR_RNDN);
    }
  });
}

// ---- arithmetic: r = a op b
inline void eval_add(MpBackend& r, const MpBackend& a, const MpBackend& b) {
  mp_detail::apply(r, a, b,
                   [](mpfr_ptr x, mpfr_srcptr p, mpfr_srcptr q) { mpfr_add(x, p, q, MPFR_RNDN); });
}
inline void eval_subtract(MpBackend& r, const MpBackend& a, const MpBackend& b) {
  mp_detail::apply(r, a, b,
                   [](mpfr_ptr x, mpfr_srcptr p, mpfr_srcptr q) { mpfr_sub(x, p, q, MPFR_RNDN); });
}
inline void eval_multiply(MpBackend& r, const MpBackend& a, const MpBackend& b) {
  mp_detail::apply(r, a, b, [&](mpfr_ptr x, mpfr_srcptr p, mpfr_srcptr q) {
    if (&a == &b) {
      mpfr_sqr(x, p, MPFR_RNDN);
    } else {
      mpfr_mul(x, p, q, MPFR_RNDN);
    }
  });
}
inline void eval_divide(MpBackend& r, const MpBackend& a, const MpBackend& b) {
  mp_detail::apply(r, a, b,
                   [](mpfr_ptr x, mpfr_srcptr p, mpfr_srcptr q) { mpfr_div(x, p, q, MPFR_RNDN); });
}

// Integer operands, as Boost's three-argument forms (y < 0 subtracts |y|, y == 0 adds).
inline void eval_add(MpBackend& r, const MpBackend& a, unsigned long y) {
  mp_detail::apply(r, a, [&](mpfr_ptr x, mpfr_srcptr p) { mpfr_add_ui(x, p, y, MPFR_RNDN); });
}
inline void eval_add(MpBackend& r, const MpBackend& a, long y) {
  mp_detail::apply(r, a, [&](mpfr_ptr x, mpfr_srcptr p) {
    if (y < 0) {
      mpfr_sub_ui(x, p, mp_detail::unsigned_abs(y), MPFR_RNDN);
    } else {
      mpfr_add_ui(x, p, static_cast<unsigned long>(y), MPFR_RNDN);
    }
  });
}
inline void eval_add(MpBackend& r, unsigned long y, const MpBackend& a) { eval_add(r, a, y); }
inline void eval_add(MpBackend& r, long y, const MpBackend& a) {
  mp_detail::apply(r, a, [&](mpfr_ptr x, mpfr_srcptr p) {
    if (y < 0) {
      mpfr_ui_sub(x, mp_detail::unsigned_abs(y), p, MPFR_RNDN);
      mpfr_neg(x, x, MPFR_RNDN);
    } else {
      mpfr_add_ui(x, p, static_cast<unsigned long>(y), MPFR_RNDN);
    }
  });
}
inline void eval_subtract(MpBackend& r, const MpBackend& a, unsigned long y) {
  mp_detail::apply(r, a, [&](mpfr_ptr x, mpfr_srcptr p) { mpfr_sub_ui(x, p, y, MPFR_RNDN); });
}
inline void eval_subtract(MpBackend& r, const MpBackend& a, long y) {
  mp_detail::apply(r, a, [&](mpfr_ptr x, mpfr_srcptr p) {
    if (y < 0) {
      mpfr_add_ui(x, p, mp_detail::unsigned_abs(y), MPFR_RNDN);
    } else {
      mpfr_sub_ui(x, p, static_cast<unsigned long>(y), MPFR_RNDN);
    }
  });
}
inline void eval_subtract(MpBackend& r, unsigned long y, const MpBackend& a) {
  mp_detail::apply(r, a, [&](mpfr_ptr x, mpfr_srcptr p) { mpfr_ui_sub(x, y, p, MPFR_RNDN); });
}
inline void eval_subtract(MpBackend& r, long y, const MpBackend& a) {
  mp_detail::apply(r, a, [&](mpfr_ptr x, mpfr_srcptr p) {
    if (y < 0) {
      mpfr_add_ui(x, p, mp_detail::unsigned_abs(y), MPFR_RNDN);
      mpfr_neg(x, x, MPFR_RNDN);
    } else {
      mpfr_ui_sub(x, static_cast<unsigned long>(y), p, MPFR_RNDN);
    }
  });
}
inline void eval_multiply(MpBackend& r, const MpBackend& a, unsigned long y) {
  mp_detail::apply(r, a, [&](mpfr_ptr x, mpfr_srcptr p) { mpfr_mul_ui(x, p, y, MPFR_RNDN); });
}
inline void eval_multiply(MpBackend& r, const MpBackend& a, long y) {
  mp_detail::apply(r, a, [&](mpfr_ptr x, mpfr_srcptr p) {
    mpfr_mul_ui(x, p, mp_detail::unsigned_abs(y), MPFR_RNDN);
    if (y < 0) mpfr_neg(x, x, MPFR_RNDN);
  });
}
inline void eval_multiply(MpBackend& r, unsigned long y, const MpBackend& a) {
  eval_multiply(r, a, y);
}
inline void eval_multiply(MpBackend& r, long y, const MpBackend& a) { eval_multiply(r, a, y); }
inline void eval_divide(MpBackend& r, const MpBackend& a, unsigned long y) {
  mp_detail::apply(r, a, [&](mpfr_ptr x, mpfr_srcptr p) { mpfr_div_ui(x, p, y, MPFR_RNDN); });
}
inline void eval_divide(MpBackend& r, const MpBackend& a, long y) {
  mp_detail::apply(r, a, [&](mpfr_ptr x, mpfr_srcptr p) {
    mpfr_div_ui(x, p, mp_detail::unsigned_abs(y), MPFR_RNDN);
    if (y < 0) mpfr_neg(x, x, MPFR_RNDN);
  });
}
inline void eval_divide(MpBackend& r, unsigned long y, const MpBackend& a) {
  mp_detail::apply(r, a, [&](mpfr_ptr x, mpfr_srcptr p) { mpfr_ui_div(x, y, p, MPFR_RNDN); });
}
inline void eval_divide(MpBackend& r, long y, const MpBackend& a) {
  mp_detail::apply(r, a, [&](mpfr_ptr x, mpfr_srcptr p) {
    mpfr_ui_div(x, mp_detail::unsigned_abs(y), p, MPFR_RNDN);
    if (y < 0) mpfr_neg(x, x, MPFR_RNDN);
  });
}

// In place with an integer, as Boost: the three-argument form with r as the operand.
inline void eval_add(MpBackend& r, unsigned long i) { eval_add(r, r, i); }
inline void eval_subtract(MpBackend& r, unsigned long i) { eval_subtract(r, r, i); }
inline void eval_multiply(MpBackend& r, unsigned long i) { eval_multiply(r, r, i); }
inline void eval_divide(MpBackend& r, unsigned long i) { eval_divide(r, r, i); }
inline void eval_multiply(MpBackend& r, long i) { eval_multiply(r, r, i); }
inline void eval_divide(MpBackend& r, long i) { eval_divide(r, r, i); }

// ---- comparison (unordered operands are the front end's: it tests for NaN first)
inline bool eval_eq(const MpBackend& a, const MpBackend& b) {
  return mpfr_equal_p(a.data(), b.data()) != 0;
}
inline bool eval_lt(const MpBackend& a, const MpBackend& b) {
  return mpfr_less_p(a.data(), b.data()) != 0;
}
inline bool eval_gt(const MpBackend& a, const MpBackend& b) {
  return mpfr_greater_p(a.data(), b.data()) != 0;
}
template <typename T>
std::enable_if_t<std::is_arithmetic_v<T>, bool> eval_eq(const MpBackend& a, const T& b) {
  return a.compare(b) == 0;
}
template <typename T>
std::enable_if_t<std::is_arithmetic_v<T>, bool> eval_lt(const MpBackend& a, const T& b) {
  return a.compare(b) < 0;
}
template <typename T>
std::enable_if_t<std::is_arithmetic_v<T>, bool> eval_gt(const MpBackend& a, const T& b) {
  return a.compare(b) > 0;
}
inline bool eval_is_zero(const MpBackend& v) { return v.is_zero(); }
inline int eval_get_sign(const MpBackend& v) { return mpfr_sgn(v.data().get()); }
inline int eval_signbit(const MpBackend& v) { return v.sign_bit() ? 1 : 0; }
inline int eval_fpclassify(const MpBackend& v) {
  return v.is_inf() ? FP_INFINITE : v.is_nan() ? FP_NAN : v.is_zero() ? FP_ZERO : FP_NORMAL;
}

// ---- conversion: floats round to nearest, integers toward zero; NaN to an integer throws.
inline void eval_convert_to(float* out, const MpBackend& v) {
  *out = mpfr_get_flt(v.data(), MPFR_RNDN);
}
inline void eval_convert_to(double* out, const MpBackend& v) {
  *out = mpfr_get_d(v.data(), MPFR_RNDN);
}
inline void eval_convert_to(long double* out, const MpBackend& v) {
  *out = mpfr_get_ld(v.data(), MPFR_RNDN);
}
inline void throw_if_nan_to_integer(const MpBackend& v) {
  if (v.is_nan()) throw std::runtime_error("Could not convert NaN to integer.");
}
inline void eval_convert_to(unsigned long* out, const MpBackend& v) {
  throw_if_nan_to_integer(v);
  *out = mpfr_get_ui(v.data(), MPFR_RNDZ);
}
inline void eval_convert_to(long* out, const MpBackend& v) {
  throw_if_nan_to_integer(v);
  *out = mpfr_get_si(v.data(), MPFR_RNDZ);
}
inline void eval_convert_to(unsigned long long* out, const MpBackend& v) {
  throw_if_nan_to_integer(v);
  *out = mpfr_get_uj(v.data(), MPFR_RNDZ);
}
inline void eval_convert_to(long long* out, const MpBackend& v) {
  throw_if_nan_to_integer(v);
  *out = mpfr_get_sj(v.data(), MPFR_RNDZ);
}

}  // namespace shardsim
