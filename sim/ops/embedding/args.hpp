// The parameters of the op `embedding`, as its scenario entry (ops/embedding/entry.cpp) parsed and
// validated them; the keys are in docs/ops/language-model.md.
#pragma once

#include <string>

#include "core/placement.hpp"

namespace shardsim {

struct EmbeddingArgs {
  std::string input;   // the token ids: an i64 tensor
  std::string weight;  // [vocab, hidden]
  std::string output;
  // Vocab-parallel only: where the looked-up rows go on the vocabulary's dim: Replicate (an
  // all-reduce of the ranks' partial lookups) or Shard(AXIS) of a token axis (a reduce-scatter:
  // sequence parallelism).
  Placement to = Placement::replicate();
  std::string batch_axis = "batch";
};

}  // namespace shardsim
