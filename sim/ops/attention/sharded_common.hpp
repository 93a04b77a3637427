// Shared vocabulary of context-parallel attention with sequence-sharded queries
// (attention/sharded_plan.hpp): the carried KV cache, what forward keeps for backward, what a
// mode's attention backward hands back, and the per-rank helpers (the KV-axis layout, renaming
// rows between the seq and kv axes, the query positions the mask reads).
//
// Include graph (one way): plan_common.hpp, ring_plan.hpp <- sharded_common.hpp <-
// sharded_cache.hpp <- sharded_ring_plan.hpp, sharded_ulysses_plan.hpp <- sharded_plan.hpp.
#pragma once

#include <string>
#include <vector>

#include "ops/attention/plan_common.hpp"

namespace shardsim {

// The KV cache a streamed chunk reads (attention/sharded_cache.hpp): the keys (after RoPE) and
// values of the C = min(window - 1, L + t) latest tokens, the window's tail. Where it lives
// depends on the mode:
//   allgather, ring: every rank keeps the tokens it owned (projected and rotated itself) that are
//                    still in the tail, in ascending position order; nothing is re-sharded
//                    between chunks (context-parallel inference with a persistent KV cache:
//                    vLLM's prefill CP, arXiv 2411.01783's pass-KV);
//   ulysses:         every rank keeps its head group's tail (Shard(head)): the head-parallel
//                    kernel is where the keys are whole.
// Empty before the first chunk (reset at every training step).
template <typename T>
struct CpShardedCache {
  std::int64_t next_position = 0;  // P of the next chunk
  std::int64_t length = 0;         // L: the keys the next chunk reads, over the whole group
  std::int64_t written_by = 0;     // t of the chunk that wrote it: older keys when L > t
  // allgather, ring: per rank, (batch, kv=n, head, head_dim); no entries before the first chunk
  std::vector<Tensor<T>> k, v;
  // per cp coordinate: the positions of its cached tokens, ascending (the same in every group)
  std::vector<std::vector<std::int64_t>> coord_positions;
  // ulysses: (batch, kv=L, head, head_dim), Shard(head) on the cp dim; no locals before
  DistTensor<T> k_heads, v_heads;

  void reset() { *this = CpShardedCache<T>(); }
};

// Shapes are global: rows = (batch, seq=n, head, head_dim), KV axis = (batch, kv=L+n, head,
// head_dim) with L the cache read (0 without [stream]), statistics = (batch, seq=n, head). Only
// the members of the plan's mode are filled.
template <typename T>
struct CpShardedSaved {
  std::int64_t first = 0;   // P: the absolute position of the chunk's first token
  std::int64_t cached = 0;  // L: the keys of the cache this chunk read
  std::vector<std::vector<std::int64_t>> positions;  // per rank: its tokens' absolute positions
  // per rank: the query positions the mask compared (the positions, or under a mask fault the
  // faulty ones), for the backward, which must mask as the forward did
  std::vector<std::vector<std::int64_t>> mask_positions;
  // per cp coordinate: the positions of the keys of its KV block (its cached tokens, then the
  // chunk tokens it owns)
  std::vector<std::vector<std::int64_t>> coord_positions;
  Layout param_grad;    // Partial on every dim that splits the rows (the cp dim included)
  DistTensor<T> q_rot;  // rows, Shard(seq) like x
  DistTensor<T> k_shard, v_shard;  // KV axis of the chunk, Shard(kv) with x's split: own keys
  // allgather, ring: per rank, its KV block (batch, kv=cached+own, head, head_dim): its cache
  // ++ its k_shard (v_shard)
  std::vector<Tensor<T>> k_blocks, v_blocks;
  DistTensor<T> k_all, v_all;  // allgather: KV axis, Replicate on the cp dim
  // ulysses: q_heads the chunk's queries, k_heads and v_heads the chunk's keys and values
  // (kv=n), Shard(head); k_group and v_group per rank the whole KV axis of its head group
  // (batch, kv=L+n, head=g, head_dim): the cache ++ k_heads (v_heads)
  DistTensor<T> q_heads, k_heads, v_heads;
  std::vector<Tensor<T>> k_group, v_group;
  std::vector<AttentionSaved<T>> core;  // ulysses: per rank, the kernel's statistics
  DistTensor<T> lse;                    // Shard(seq) (ulysses: Shard(head))
  DistTensor<T> attn;                   // rows, Shard(seq) like x

  // The oracle tensor of the chunk's keys and values on the KV axis: all of k_all (v_all) when
  // no cache was read, else its last t keys, NAME.k_new (NAME.v_new).
  AttentionPart chunk_keys_part() const {
    return cached == 0 ? AttentionPart::k_all : AttentionPart::k_new;
  }
  AttentionPart chunk_values_part() const {
    return cached == 0 ? AttentionPart::v_all : AttentionPart::v_new;
  }
  // The absolute positions of the KV axis the chunk attends: P - L .. P + n - 1.
  std::vector<std::int64_t> kv_positions() const {
    return position_range(first - cached, cached + q_rot.global.extent("seq"));
  }
  std::vector<std::int64_t> query_positions() const {
    return position_range(first, q_rot.global.extent("seq"));
  }
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

// The absolute positions of a share of a chunk that starts at absolute position `first`.
inline std::vector<std::int64_t> share_positions(const Slice& share, std::int64_t first) {
  std::vector<std::int64_t> positions = slice_positions(share);
  for (std::int64_t& p : positions) p += first;
  return positions;
}

// The query positions a rank's mask compares, from its share of a chunk that starts at absolute
// position `first`: its tokens' absolute positions; under mask_local_query_positions its row
// indices 0, 1, ...; under mask_zigzag_contiguous its first run's offset plus the row index (the
// second zigzag run masked as if it followed the first).
inline std::vector<std::int64_t> mask_query_positions(const AttentionFaults& faults,
                                                      const Slice& share, std::int64_t first) {
  if (faults.mask_local_query_positions) return position_range(0, share.valid());
  if (faults.mask_zigzag_contiguous) return position_range(first + share.begin, share.valid());
  return share_positions(share, first);
}

}  // namespace detail

}  // namespace shardsim
