// The parameters of the op `redistribute`, as its scenario entry (ops/redistribute/entry.cpp)
// parsed and validated them; the keys are in docs/scenario-format.md.
#pragma once

#include <string>

#include "core/placement.hpp"

namespace shardsim {

struct RedistributeArgs {
  std::string input;
  std::string output;
  Placement to;
};

}  // namespace shardsim
