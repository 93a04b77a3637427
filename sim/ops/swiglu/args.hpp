// The parameters of the op `swiglu`, as its scenario entry (ops/swiglu/entry.cpp) parsed and
// validated them; the keys are in docs/scenario-format.md.
#pragma once

#include <string>

namespace shardsim {

struct SwigluArgs {
  std::string input;  // the gate g
  std::string up;
  std::string output;
};

}  // namespace shardsim
