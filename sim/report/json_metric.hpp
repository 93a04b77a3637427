// Private to the report writers: JSON has no infinity or NaN, so non-finite metrics are written
// as the strings "inf", "-inf" and "nan" (README.md, "Report format").
#pragma once

#include <cmath>
#include <nlohmann/json.hpp>

namespace shardsim {

inline nlohmann::ordered_json json_metric(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  return value;
}

}  // namespace shardsim
