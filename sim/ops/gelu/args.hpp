// The parameters of the op `gelu`, as its scenario entry (ops/gelu/entry.cpp)
// parsed and validated them; the keys are in docs/scenario-format.md.
#pragma once

#include <string>

namespace shardsim {

struct GeluArgs {
  std::string input;
  std::string output;
  std::string approximate = "none";  // none | tanh
};

}  // namespace shardsim
