// Template body of the lab's engine. Included by lab.cpp (float, double) and lab_mp.cpp (Mp).
#pragma once

#include <charconv>
#include <cmath>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>

#include "core/error.hpp"
#include "lab/lab.hpp"

namespace shardsim::detail {

// A plain decimal number: [+-]digits[.digits][e[+-]digits]. Rejects nan, inf, hex and garbage
// before any scalar parser sees it.
inline bool is_decimal(std::string_view text) {
  std::size_t i = 0;
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
  std::size_t digits = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i, ++digits;
  if (i < text.size() && text[i] == '.') {
    ++i;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i, ++digits;
  }
  if (digits == 0) return false;
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
    std::size_t exponent_digits = 0;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i, ++exponent_digits;
    if (exponent_digits == 0 || exponent_digits > 6) return false;
  }
  return i == text.size();
}

template <typename T>
class LabEngineT final : public LabEngine {
 public:
  // T's own operations only: parse(text) rounds the decimal once into T; str(v) prints it.
  using Parse = T (*)(std::string_view);
  using Str = std::string (*)(const T&);
  LabEngineT(Parse parse, Str str) : parse_(parse), str_(str) { reset(); }

  void reset() override {
    a_ = T(1);
    x_ = T(0);
    predicted_y_.reset();
    predicted_slope_.reset();
    steps_ = 0;
    right_ = 0;
    judged_ = 0;
  }

  void set(char variable, std::string_view text) override {
    (variable == 'a' ? a_ : x_) = value(text);
  }

  void predict(char what, std::string_view text) override {
    (what == 'y' ? predicted_y_ : predicted_slope_) = value(text);
  }

  std::string step() override {
    // y = a * x^2 = (a * x) * x and slope = 2 * a * x = (2 * a) * x, each rounded per operation.
    const T y = T(a_ * x_) * x_;
    const T slope = T(T(2) * a_) * x_;
    ++steps_;
    std::ostringstream out;
    out << "step " << steps_ << ": a = " << str_(a_) << ", x = " << str_(x_) << "\n"
        << "  y     = a*x^2 = " << padded(str_(y)) << judge(predicted_y_, y) << "\n"
        << "  slope = 2*a*x = " << padded(str_(slope)) << judge(predicted_slope_, slope) << "\n";
    predicted_y_.reset();
    predicted_slope_.reset();
    return out.str();
  }

  std::string show() const override {
    std::ostringstream out;
    out << "a = " << str_(a_) << ", x = " << str_(x_) << "; predicted y "
        << (predicted_y_ ? str_(*predicted_y_) : "-") << ", slope "
        << (predicted_slope_ ? str_(*predicted_slope_) : "-") << "; " << steps_ << " step(s), "
        << right_ << " of " << judged_ << " prediction(s) right\n";
    return out.str();
  }

 private:
  static std::string padded(std::string text) {
    if (text.size() < 12) text.resize(12, ' ');
    return text;
  }

  T value(std::string_view text) const {
    if (!is_decimal(text)) {
      throw InputError(quote(text) + " is not a number (expected e.g. 1, 0.5, -2e-3)");
    }
    return parse_(text);
  }

  // Right when |p - truth| <= 1e-6 * max(1, |truth|), computed in T. A truth that overflowed
  // (inf) makes every prediction wrong: a prediction is a finite number, and the bound would
  // be inf <= inf.
  std::string judge(const std::optional<T>& predicted, const T& truth) {
    if (!predicted) return "  (no prediction)";
    using std::abs;
    using std::isfinite;
    const T error = abs(T(*predicted - truth));
    const T scale = abs(truth) > T(1) ? abs(truth) : T(1);
    const bool finite = isfinite(truth);
    const bool right = finite && error <= T(T(1) / T(1000000)) * scale;
    ++judged_;
    if (right) ++right_;
    return "  predicted " + padded(str_(*predicted)) +
           (right    ? "  right"
            : finite ? "  wrong"
                     : "  wrong (the true value overflowed)");
  }

  Parse parse_;
  Str str_;
  T a_;
  T x_;
  std::optional<T> predicted_y_;
  std::optional<T> predicted_slope_;
  int steps_ = 0;
  int right_ = 0;
  int judged_ = 0;
};

}  // namespace shardsim::detail
