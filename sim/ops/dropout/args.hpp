// The parameters of the op `dropout`, as its scenario entry (ops/dropout/entry.cpp)
// parsed and validated them; the keys are in docs/scenario-format.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace shardsim {

struct DropoutArgs {
  std::string input;
  std::string output;
  double p = 0;
  std::optional<std::uint64_t> seed;    // default: the scenario seed
  std::optional<std::uint32_t> stream;  // default: the step index
  std::string policy = "global";        // global | same_seed | rank_offset
};

}  // namespace shardsim
