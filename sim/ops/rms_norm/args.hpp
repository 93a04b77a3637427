// The parameters of the op `rms_norm`, as its scenario entry (ops/rms_norm/entry.cpp)
// parsed and validated them; the keys are in docs/scenario-format.md.
#pragma once

#include <optional>
#include <string>

namespace shardsim {

struct RmsNormArgs {
  std::string input;
  std::string output;
  std::optional<std::string> weight;
  std::string axis = "hidden";
  double eps = 1e-5;
};

}  // namespace shardsim
