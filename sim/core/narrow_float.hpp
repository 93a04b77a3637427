// NarrowFloat: the scalar of a narrow run with accumulate = "storage" (storage.hpp). It holds a
// float whose value is always representable in the thread's narrow format, and rounds every
// arithmetic result to that format (round-to-nearest-even): a + b is float(a) + float(b), rounded
// once in f32, then rounded to the format. For +, -, *, / and sqrt that is the correctly rounded
// narrow result: rounding twice, through a format of p' >= 2p + 2 bits, is innocuous for these
// operations (S. A. Figueroa, "When is double rounding innocuous?", SIGNUM 1995), and f32 has
// p' = 24 >= 18 (bf16, p = 8) and >= 24 (f16, p = 11). exp, log, tanh, erf, sin, cos, acos and
// pow are float's results, then rounded: a kernel that works in bf16 storage.
//
// The format is per thread, like the mp precision (mp.hpp): set_narrow_float_format before the
// run. The same templated kernels serve NarrowFloat as float, double and Mp (invariant 6).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/narrow.hpp"
#include "core/scalar.hpp"
#include "core/storage.hpp"

namespace shardsim {

namespace detail {
inline thread_local NarrowFormat narrow_float_format = NarrowFormat::bf16;
}  // namespace detail

// The format NarrowFloat arithmetic rounds to on this thread (default bf16).
inline void set_narrow_float_format(NarrowFormat format) { detail::narrow_float_format = format; }
inline NarrowFormat narrow_float_format() { return detail::narrow_float_format; }

class NarrowFloat {
 public:
  NarrowFloat() = default;
  // From any arithmetic value: rounded once to the format (a double directly, never via float).
  template <typename A>
  requires std::is_arithmetic_v<A> NarrowFloat(A value)
      : value_(from_double(static_cast<double>(value))) {}  // NOLINT: implicit, as Mp

  explicit operator float() const { return value_; }
  explicit operator double() const { return value_; }
  float value() const { return value_; }

  // The result of a float computation, rounded to the format.
  static NarrowFloat rounded(float value) {
    NarrowFloat out;
    out.value_ = round_to_narrow(narrow_float_format(), value);
    return out;
  }

  friend NarrowFloat operator+(NarrowFloat a, NarrowFloat b) {
    return rounded(a.value_ + b.value_);
  }
  friend NarrowFloat operator-(NarrowFloat a, NarrowFloat b) {
    return rounded(a.value_ - b.value_);
  }
  friend NarrowFloat operator*(NarrowFloat a, NarrowFloat b) {
    return rounded(a.value_ * b.value_);
  }
  friend NarrowFloat operator/(NarrowFloat a, NarrowFloat b) {
    return rounded(a.value_ / b.value_);
  }
  friend NarrowFloat operator-(NarrowFloat a) { return exact(-a.value_); }
  NarrowFloat& operator+=(NarrowFloat b) { return *this = *this + b; }
  NarrowFloat& operator-=(NarrowFloat b) { return *this = *this - b; }
  NarrowFloat& operator*=(NarrowFloat b) { return *this = *this * b; }
  NarrowFloat& operator/=(NarrowFloat b) { return *this = *this / b; }

  friend bool operator==(NarrowFloat a, NarrowFloat b) { return a.value_ == b.value_; }
  friend bool operator!=(NarrowFloat a, NarrowFloat b) { return a.value_ != b.value_; }
  friend bool operator<(NarrowFloat a, NarrowFloat b) { return a.value_ < b.value_; }
  friend bool operator>(NarrowFloat a, NarrowFloat b) { return a.value_ > b.value_; }
  friend bool operator<=(NarrowFloat a, NarrowFloat b) { return a.value_ <= b.value_; }
  friend bool operator>=(NarrowFloat a, NarrowFloat b) { return a.value_ >= b.value_; }

  // Functions, found by ADL as for Mp (`using std::sqrt; sqrt(x)`): f32 result, then rounded.
  friend NarrowFloat sqrt(NarrowFloat a) { return rounded(std::sqrt(a.value_)); }
  friend NarrowFloat exp(NarrowFloat a) { return rounded(std::exp(a.value_)); }
  friend NarrowFloat log(NarrowFloat a) { return rounded(std::log(a.value_)); }
  friend NarrowFloat tanh(NarrowFloat a) { return rounded(std::tanh(a.value_)); }
  friend NarrowFloat erf(NarrowFloat a) { return rounded(std::erf(a.value_)); }
  friend NarrowFloat sin(NarrowFloat a) { return rounded(std::sin(a.value_)); }
  friend NarrowFloat cos(NarrowFloat a) { return rounded(std::cos(a.value_)); }
  friend NarrowFloat acos(NarrowFloat a) { return rounded(std::acos(a.value_)); }
  friend NarrowFloat pow(NarrowFloat a, NarrowFloat b) {
    return rounded(std::pow(a.value_, b.value_));
  }
  friend NarrowFloat abs(NarrowFloat a) { return exact(std::fabs(a.value_)); }
  friend NarrowFloat fabs(NarrowFloat a) { return exact(std::fabs(a.value_)); }
  friend bool isnan(NarrowFloat a) { return std::isnan(a.value_); }
  friend bool isinf(NarrowFloat a) { return std::isinf(a.value_); }
  friend bool isfinite(NarrowFloat a) { return std::isfinite(a.value_); }
  friend bool signbit(NarrowFloat a) { return std::signbit(a.value_); }

 private:
  static float from_double(double value) {
    return narrow_to_float(narrow_float_format(), narrow_from_double(narrow_float_format(), value));
  }
  // A value already in the format (negation, magnitude).
  static NarrowFloat exact(float value) {
    NarrowFloat out;
    out.value_ = value;
    return out;
  }

  float value_ = 0;
};

template <>
struct ScalarTraits<NarrowFloat> {
  static constexpr const char* name = "narrow";
  static double to_double(NarrowFloat v) { return v.value(); }
  // In units of the format's last place.
  static double ulp(NarrowFloat a, NarrowFloat b) {
    const NarrowFormat format = narrow_float_format();
    return static_cast<double>(narrow_ulp_distance(format, narrow_from_float(format, a.value()),
                                                   narrow_from_float(format, b.value())));
  }
  static bool identical(NarrowFloat a, NarrowFloat b) {
    return ScalarTraits<float>::identical(a.value(), b.value());
  }
};

}  // namespace shardsim

// The limits the kernels read (negative_infinity in ops/attention/attention.hpp starts a running
// max and LSE at -inf). Unspecialized, std::numeric_limits<NarrowFloat>::infinity() would be
// NarrowFloat() = 0, and every attention row's merge would start from 0 instead of -inf.
template <>
struct std::numeric_limits<shardsim::NarrowFloat> {
  static constexpr bool is_specialized = true;
  static constexpr bool has_infinity = true;
  static constexpr bool has_quiet_NaN = true;
  static shardsim::NarrowFloat infinity() {
    return shardsim::NarrowFloat::rounded(std::numeric_limits<float>::infinity());
  }
  static shardsim::NarrowFloat quiet_NaN() {
    return shardsim::NarrowFloat::rounded(std::numeric_limits<float>::quiet_NaN());
  }
};
