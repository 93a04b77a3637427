// Private to the report writers: JSON has no infinity or NaN, so non-finite metrics are written
// as the strings "inf", "-inf" and "nan"; Magnitudes beyond the double range as strings too
// (docs/reports.md "Report format").
#pragma once

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/magnitude.hpp"

namespace shardsim {

inline nlohmann::ordered_json json_metric(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  return value;
}

// A Magnitude: a number when it is 0 or a normal double (so a metric a double holds is written
// exactly as json_metric writes that double); outside the normal double range (an mp gap or rtol
// below 2^-1022) a string in scientific notation with 17 significant digits, e.g.
// "2.8329660175598863e-612"; "inf", "nan".
inline nlohmann::ordered_json magnitude_json(const Magnitude& v) {
  if (v.is_nan()) return "nan";
  if (!v.is_finite()) return "inf";
  if (v.is_zero()) return 0.0;
  if (v.exponent() > -1021 && v.exponent() <= 1024) return v.to_double();
  return v.sci(16);
}

}  // namespace shardsim
