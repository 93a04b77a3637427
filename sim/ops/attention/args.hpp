// The parameters of the op `sliding_window_attention`, as its scenario entry
// (ops/attention/entry.cpp) parsed and validated them; the keys are in docs/scenario-format.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace shardsim {

struct SlidingWindowAttentionArgs {
  std::string input;
  std::string wq;
  std::string wk;
  std::string wv;
  std::string wo;
  std::string output;
  std::int64_t n_head = 1;
  std::int64_t head_dim = 2;
  std::optional<std::int64_t> window;  // none: plain causal
  double rope_theta = 10000.0;
  std::string rope = "rotate_half";   // rotate_half | interleaved
  std::string cp_mode = "allgather";  // allgather | ring | ulysses
};

}  // namespace shardsim
