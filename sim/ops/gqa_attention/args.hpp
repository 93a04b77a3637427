// The parameters of the op `gqa_attention`, as its scenario entry (ops/gqa_attention/entry.cpp)
// parsed and validated them; the keys are in docs/ops/language-model.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace shardsim {

struct GqaAttentionArgs {
  std::string input;  // x [batch, seq, hidden]
  std::string wq;     // [hidden, head, head_dim]
  std::string wk;     // [hidden, kv_head, head_dim]
  std::string wv;     // [hidden, kv_head, head_dim]
  std::string wo;     // [head, head_dim, hidden]
  std::string output;
  std::int64_t n_head = 1;
  std::int64_t n_kv_head = 1;
  std::int64_t head_dim = 2;
  double rope_theta = 10000.0;
  std::string rope = "rotate_half";  // rotate_half | interleaved | none
  // With the input Shard(seq) on a mesh dim (context parallelism): allgather | ring. Unset:
  // allgather where there is a cp dim; the loader refuses it where there is none.
  std::optional<std::string> cp_mode;
};

}  // namespace shardsim
