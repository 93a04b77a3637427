#include "core/mp_exact.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.hpp"

namespace shardsim {

Magnitude mp_magnitude(mpfr_srcptr x) {
  if (mpfr_nan_p(x)) return Magnitude::nan();
  if (mpfr_inf_p(x)) return Magnitude::infinity();
  if (mpfr_zero_p(x)) return Magnitude();
  long exponent = 0;
  const double mantissa = mpfr_get_d_2exp(&exponent, x, MPFR_RNDN);
  return Magnitude::scaled(mantissa, exponent);
}

Magnitude mp_magnitude(const Mp& value) { return mp_magnitude(value.backend().data()); }

Magnitude mp_abs_difference(const Mp& a, const Mp& b) {
  struct Scratch {
    mpfr_t value;
    Scratch() { mpfr_init2(value, MPFR_PREC_MIN); }
    ~Scratch() { mpfr_clear(value); }
  };
  thread_local Scratch scratch;
  const mpfr_prec_t bits =
      std::max(mpfr_get_prec(a.backend().data()), mpfr_get_prec(b.backend().data()));
  if (mpfr_get_prec(scratch.value) != bits) mpfr_set_prec(scratch.value, bits);
  mpfr_sub(scratch.value, a.backend().data(), b.backend().data(), MPFR_RNDN);
  return mp_magnitude(scratch.value);
}

std::string mp_exact_text(const Mp& value) {
  char* text = nullptr;
  const int length = mpfr_asprintf(&text, "%Ra", value.backend().data().get());
  SHARDSIM_ASSERT(length >= 0 && text != nullptr, "mpfr_asprintf failed");
  std::string out(text, static_cast<std::size_t>(length));
  mpfr_free_str(text);
  return out;
}

std::string mp_decimal_text(const Mp& value, int digits) {
  char* text = nullptr;
  const int length = mpfr_asprintf(&text, "%.*Re", digits - 1, value.backend().data().get());
  SHARDSIM_ASSERT(length >= 0 && text != nullptr, "mpfr_asprintf failed");
  std::string out(text, static_cast<std::size_t>(length));
  mpfr_free_str(text);
  return out;
}

std::pair<std::string, std::string> distinguishing_texts(const Mp& a, const Mp& b) {
  // Enough digits for the wider significand to round-trip: ceil(bits * log10(2)) + 1.
  const long bits = std::max(mpfr_get_prec(a.backend().data()), mpfr_get_prec(b.backend().data()));
  const int most = static_cast<int>(static_cast<double>(bits) * 0.30103) + 2;
  int digits = 17;
  std::pair<std::string, std::string> out{mp_decimal_text(a, digits), mp_decimal_text(b, digits)};
  if (out.first != out.second || a == b || isnan(a) || isnan(b)) return out;
  // Equal at 17 digits: they cannot differ (short of a rounding boundary falling between them)
  // before digit ~log10(max|a|,|b| / |a - b|) + 1, so the search starts a few digits before that
  // rather than at 18: one digit at a time it costs ~bits/3 conversions of ~bits/3 digits each,
  // a minute at mp65536.
  const Magnitude gap = mp_abs_difference(a, b);
  const double larger = std::max(mp_magnitude(a).log2(), mp_magnitude(b).log2());
  if (gap.is_finite() && !gap.is_zero() && std::isfinite(larger)) {
    const double from = (larger - gap.log2()) * std::log10(2.0) - 2;
    if (from > digits) digits = static_cast<int>(std::min<double>(from, most));
  }
  do {
    ++digits;
    out = {mp_decimal_text(a, digits), mp_decimal_text(b, digits)};
  } while (out.first == out.second && digits < most);
  return out;
}

}  // namespace shardsim
