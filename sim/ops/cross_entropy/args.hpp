// The parameters of the op `cross_entropy`, as its scenario entry (ops/cross_entropy/entry.cpp)
// parsed and validated them; the keys are in docs/scenario-format.md and docs/ops/language-model.md.
#pragma once

#include <cstdint>
#include <string>

namespace shardsim {

struct CrossEntropyArgs {
  std::string input;   // the logits, [..., vocab] with the vocabulary the last axis
  std::string labels;  // an i64 tensor: the logits' shape without the vocabulary axis
  std::string output;
  std::int64_t ignore_index = -100;
  double label_smoothing = 0.0;
  double z_loss = 0.0;
  std::string vocab_axis = "vocab";
  std::string batch_axis = "batch";
};

}  // namespace shardsim
