// The parameters of the op `linear`, as its scenario entry (ops/linear/entry.cpp)
// parsed and validated them; the keys are in docs/scenario-format.md.
#pragma once

#include <optional>
#include <string>

namespace shardsim {

struct LinearArgs {
  std::string input;
  std::string weight;  // [out, in]
  std::optional<std::string> bias;
  std::string output;
  std::optional<std::string> parallel;  // none | column | row: asserts the weight's form
};

}  // namespace shardsim
