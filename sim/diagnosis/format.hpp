// Number formatting shared by the signatures' evidence lines (internal to sim/diagnosis).
#pragma once

#include <cmath>
#include <cstdio>
#include <string>

namespace shardsim::diag {

// Three significant digits: "3.14e-05", "0.25", "inf".
inline std::string num(double value) {
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  if (std::isnan(value)) return "nan";
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", value);
  return text;
}

// "2^-24.0"
inline std::string pow2(double value) {
  if (!(value > 0)) return "0";
  char text[32];
  std::snprintf(text, sizeof text, "2^%.1f", std::log2(value));
  return text;
}

// |a - b| / max(|b|, tiny): a relative difference that is finite when b is 0.
inline double rel(double a, double b) {
  const double scale = std::fabs(b);
  return std::fabs(a - b) / (scale > 0 ? scale : 1e-300);
}

}  // namespace shardsim::diag
