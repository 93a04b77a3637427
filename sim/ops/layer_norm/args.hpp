// The parameters of the op `layer_norm`, as its scenario entry (ops/layer_norm/entry.cpp)
// parsed and validated them; the keys are in docs/scenario-format.md.
#pragma once

#include <optional>
#include <string>

namespace shardsim {

struct LayerNormArgs {
  std::string input;
  std::string output;
  std::optional<std::string> weight;  // shape [axis]
  std::optional<std::string> bias;    // shape [axis]
  std::string axis = "hidden";
  double eps = 1e-5;
  std::optional<std::string> stats;  // sum_sumsq | welford | redistribute (Shard(axis) input)
  std::string token_axis = "seq";    // the redistribute mode's token axis
};

}  // namespace shardsim
