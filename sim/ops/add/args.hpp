// The parameters of the op `add`, as its scenario entry (ops/add/entry.cpp)
// parsed and validated them; the keys are in docs/scenario-format.md.
#pragma once

#include <string>

namespace shardsim {

struct AddArgs {
  std::string input;
  std::string residual;
  std::string output;
};

}  // namespace shardsim
