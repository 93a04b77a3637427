// The parameters of the op `mse_loss`, as its scenario entry (ops/loss/entry.cpp)
// parsed and validated them; the keys are in docs/scenario-format.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace shardsim {

struct MseLossArgs {
  std::string input;
  std::string target;
  std::string output;
  std::optional<std::vector<std::int64_t>> valid_lengths;
  std::string batch_axis = "batch";
  std::string seq_axis = "seq";
  std::string feature_axis = "hidden";
};

}  // namespace shardsim
