// Shared vocabulary of context-parallel attention with sequence-sharded queries
// (attention/sharded_plan.hpp): what forward keeps for backward, what a mode's attention
// backward hands back, and the per-rank helpers (the KV-axis layout, renaming rows between the
// seq and kv axes, the query positions the mask reads).
//
// Include graph (one way): plan_common.hpp, ring_plan.hpp <- sharded_common.hpp <-
// sharded_ring_plan.hpp, sharded_ulysses_plan.hpp <- sharded_plan.hpp.
#pragma once

#include <string>
#include <vector>

#include "shardsim/ops/attention/plan_common.hpp"

namespace shardsim {

// Shapes are global: rows = (batch, seq=n, head, head_dim), KV axis = (batch, kv=n, head,
// head_dim), statistics = (batch, seq=n, head). Only the members of the plan's mode are filled.
template <typename T>
struct CpShardedSaved {
  std::vector<std::vector<std::int64_t>> positions;  // per rank: its tokens' absolute positions
  // per rank: the query positions the mask compared (the positions, or under a mask fault the
  // faulty ones), for the backward, which must mask as the forward did
  std::vector<std::vector<std::int64_t>> mask_positions;
  // per cp coordinate: the positions of the tokens it owns, i.e. of the keys of its KV block
  std::vector<std::vector<std::int64_t>> coord_positions;
  Layout param_grad;  // Partial on every dim that splits the rows (the cp dim included)
  DistTensor<T> q_rot;             // rows, Shard(seq) like x
  DistTensor<T> k_shard, v_shard;  // KV axis, Shard(kv) with x's split: each rank's own keys
  DistTensor<T> k_all, v_all;      // allgather: KV axis, Replicate on the cp dim
  DistTensor<T> q_heads, k_heads, v_heads;  // ulysses: whole sequence, Shard(head)
  std::vector<AttentionSaved<T>> core;      // ulysses: per rank, the kernel's statistics
  DistTensor<T> lse;                        // Shard(seq) (ulysses: Shard(head))
  DistTensor<T> attn;                       // rows, Shard(seq) like x
};

// What a mode's attention backward hands back: the gradient of each rank's rotated queries
// (Shard(seq), grad(NAME.q_rot)) and of its own rotated keys and values at their owners
// (Shard(kv), grad(NAME.k_shard), grad(NAME.v_shard)).
template <typename T>
struct ShardedCoreGrads {
  DistTensor<T> q_rot;
  DistTensor<T> k;
  DistTensor<T> v;
};

namespace detail {

// x's layout with the cp dim's placement moved from the seq axis onto the kv axis (same split).
inline Layout kv_layout(const Layout& seq_layout, int cp_dim) {
  const Placement& p = seq_layout.on(cp_dim);
  return seq_layout.with(cp_dim, Placement::shard("kv", p.split));
}

// A rank's (batch, POS=n, head, head_dim) rows with the position axis renamed to `to`
// ("seq" <-> "kv"): the same values in the same order.
template <typename T>
Tensor<T> renamed(const Tensor<T>& t, const std::string& to) {
  const Shape& s = t.shape();
  return t.reshaped(head_shape(s.extent("batch"), to, s.axes()[1].extent, s.extent("head"),
                               s.extent("head_dim")));
}

// The query positions a rank's mask compares, from its share of the sequence: its tokens'
// global positions; under mask_local_query_positions its row indices 0, 1, ...; under
// mask_zigzag_contiguous its first run's offset plus the row index (the second zigzag run
// masked as if it followed the first).
inline std::vector<std::int64_t> mask_query_positions(const AttentionFaults& faults,
                                                      const Slice& share) {
  if (faults.mask_local_query_positions) return position_range(0, share.valid());
  if (faults.mask_zigzag_contiguous) return position_range(share.begin, share.valid());
  return slice_positions(share);
}

}  // namespace detail

}  // namespace shardsim
