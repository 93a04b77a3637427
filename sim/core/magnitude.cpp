// Magnitude (core/magnitude.hpp): mantissa * 2^exponent arithmetic; decimal text through
// MPFR, which converts exactly at any exponent.
#include "core/magnitude.hpp"

#include <charconv>
#include <cmath>
#include <limits>
#include <mpfr.h>
#include <vector>

namespace shardsim {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

}  // namespace

Magnitude Magnitude::of(double v) {
  if (std::isnan(v)) return nan();
  if (std::isinf(v)) return infinity();
  return scaled(v, 0);
}

Magnitude Magnitude::scaled(double m, long e) {
  Magnitude out;
  if (std::isnan(m)) return nan();
  if (std::isinf(m)) return infinity();
  if (m == 0) return out;
  int shift = 0;
  out.mantissa_ = std::frexp(std::fabs(m), &shift);
  out.exponent_ = e + shift;
  return out;
}

Magnitude Magnitude::infinity() {
  Magnitude out;
  out.mantissa_ = kInf;
  return out;
}

Magnitude Magnitude::nan() {
  Magnitude out;
  out.mantissa_ = kNaN;
  return out;
}

std::optional<Magnitude> Magnitude::parse(std::string_view text) {
  if (text.size() > 2 && text.substr(0, 2) == "2^") {
    long e = 0;
    const char* end = text.data() + text.size();
    const auto [at, error] = std::from_chars(text.data() + 2, end, e);
    if (error != std::errc() || at != end) return std::nullopt;
    return scaled(1.0, e);
  }
  const std::string owned(text);
  if (owned.empty() || owned.front() == '-') return std::nullopt;
  mpfr_t value;
  mpfr_init2(value, 53);
  char* end = nullptr;
  mpfr_strtofr(value, owned.c_str(), &end, 0, MPFR_RNDN);
  std::optional<Magnitude> out;
  if (end == owned.c_str() + owned.size() && mpfr_number_p(value)) {
    if (mpfr_zero_p(value)) {
      out = Magnitude();
    } else {
      long e = 0;
      const double m = mpfr_get_d_2exp(&e, value, MPFR_RNDN);  // exact: value has 53 bits
      out = scaled(m, e);
    }
  }
  mpfr_clear(value);
  return out;
}

bool Magnitude::is_nan() const { return std::isnan(mantissa_); }
bool Magnitude::is_finite() const { return std::isfinite(mantissa_); }

double Magnitude::log2() const {
  if (!is_finite()) return mantissa_;  // inf or NaN
  if (is_zero()) return -kInf;
  return std::log2(mantissa_) + static_cast<double>(exponent_);
}

double Magnitude::to_double() const {
  if (!is_finite() || is_zero()) return mantissa_;
  if (exponent_ > 1100) return kInf;
  if (exponent_ < -1100) return 0;
  return std::ldexp(mantissa_, static_cast<int>(exponent_));
}

std::string Magnitude::sci(int digits) const {
  if (is_nan()) return "nan";
  if (!is_finite()) return "inf";
  if (is_zero()) return "0";
  mpfr_t value;
  mpfr_init2(value, 53);
  mpfr_set_d(value, mantissa_, MPFR_RNDN);
  mpfr_mul_2si(value, value, exponent_, MPFR_RNDN);  // exact: only the exponent changes
  const int size = mpfr_snprintf(nullptr, 0, "%.*Re", digits, value);
  std::vector<char> text(static_cast<std::size_t>(size) + 1);
  mpfr_snprintf(text.data(), text.size(), "%.*Re", digits, value);
  mpfr_clear(value);
  return text.data();
}

Magnitude operator*(const Magnitude& a, const Magnitude& b) {
  if (a.is_nan() || b.is_nan()) return Magnitude::nan();
  if (!a.is_finite() || !b.is_finite()) {
    return a.is_zero() || b.is_zero() ? Magnitude::nan() : Magnitude::infinity();
  }
  return Magnitude::scaled(a.mantissa_ * b.mantissa_, a.exponent_ + b.exponent_);
}

Magnitude operator/(const Magnitude& a, const Magnitude& b) {
  if (a.is_nan() || b.is_nan()) return Magnitude::nan();
  if (a.is_zero()) return Magnitude();
  if (!a.is_finite()) return b.is_finite() ? Magnitude::infinity() : Magnitude::nan();
  if (b.is_zero()) return Magnitude::infinity();
  if (!b.is_finite()) return Magnitude();
  return Magnitude::scaled(a.mantissa_ / b.mantissa_, a.exponent_ - b.exponent_);
}

bool operator<(const Magnitude& a, const Magnitude& b) {
  if (a.is_nan() || b.is_nan()) return false;
  if (a.is_zero() || b.is_zero()) return a.is_zero() && !b.is_zero();
  if (!a.is_finite() || !b.is_finite()) return a.is_finite();
  if (a.exponent_ != b.exponent_) return a.exponent_ < b.exponent_;
  return a.mantissa_ < b.mantissa_;
}

bool operator==(const Magnitude& a, const Magnitude& b) {
  return a.mantissa_ == b.mantissa_ && a.exponent_ == b.exponent_;
}

Magnitude max(const Magnitude& a, const Magnitude& b) {
  if (a.is_nan()) return a;
  if (b.is_nan()) return b;
  return a < b ? b : a;
}

}  // namespace shardsim
