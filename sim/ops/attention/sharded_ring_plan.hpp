// cp_mode = "ring" with sequence-sharded queries (attention/sharded_plan.hpp): every rank keeps
// its own queries and its own KV block (its tokens' rotated keys and values, Shard(kv) with x's
// split: chunk, balanced or zigzag; streamed, its cached tokens' before them), and the KV blocks
// travel around the cp group by send/recv with their owners' key positions.
//
// Hop h = 0 .. k-1: the member at coordinate c holds the block of coordinate (c - h) mod k
// (sends to c + 1, receives from c - 1) and computes its queries against that block with the
// mask on global positions (its queries' positions, the block owner's key positions), merged
// into its running (out, lse) by ring_merge (ring_plan.hpp: log-sum-exp from (0, -inf), or a
// ring_merge_* fault). Merge order on coordinate c: blocks c, c-1, ..., c-k+1 (mod k), arrival
// order. The merges reorder the dense arithmetic: NAME.lse and NAME.attn (Shard(seq)) are
// compared within tolerance.
//
// Backward (ring attention's): the blocks travel the same ring again, each carrying its dK and
// dV accumulators. At every hop the member adds its queries' contributions
// (attention_block_backward from the merged out and lse; under ring_backward_local_lse the
// block's own lse) to its dq and to the visiting block's dK/dV; after the k hops one more
// send/recv ships every block's dK/dV back to its owner, which keeps its chunk keys' part (the
// cache is detached). Sum order of a block owned by
// coordinate o: the contributions of coordinates o, o+1, ..., o+k-1 (mod k), the order it
// visits them; dq of coordinate c sums its blocks in arrival order.
#pragma once

#include "ops/attention/ring_plan.hpp"
#include "ops/attention/sharded_common.hpp"

namespace shardsim {

// Fills saved.lse (batch, seq, head) and saved.attn (batch, seq, head, head_dim), Shard(seq) laid
// out as `rows` (x's layout), from saved.q_rot and the KV blocks saved.k_blocks, saved.v_blocks.
template <typename T>
void sharded_ring_attention_forward(const World<T>& world, const CpAttentionConfig& config,
                                    const Layout& rows, CpShardedSaved<T>& saved) {
  const int k = world.group_size();
  const auto count = static_cast<std::size_t>(world.size());
  // Per rank: the running merge, out (batch, seq=mine, head, head_dim) and lse (batch, seq=mine,
  // head); the KV block held at the current hop (batch, kv=block, head, head_dim).
  std::vector<Tensor<T>> out(count), lse(count);
  std::vector<std::vector<int>> merged(count);  // ring_merge_faulty's per-row block counts
  std::vector<Tensor<T>> k_blocks = saved.k_blocks;
  std::vector<Tensor<T>> v_blocks = saved.v_blocks;
  world.for_each_rank([&](int r) {
    const auto at = static_cast<std::size_t>(r);
    out[at] = Tensor<T>(saved.q_rot.local(r).shape());
    lse[at] = Tensor<T>(saved.q_rot.local(r).shape().without("head_dim"));
    for (T& value : lse[at].values()) value = negative_infinity<T>();
  });
  for (int hop = 0; hop < k; ++hop) {
    world.for_each_rank([&](int r) {
      const auto at = static_cast<std::size_t>(r);
      const auto owner = static_cast<std::size_t>(detail::ring_owner(world.coord(r), hop, k));
      Tensor<T> block_out;  // (batch, seq=mine, head, head_dim)
      AttentionSaved<T> block_saved;
      attention_forward(saved.q_rot.local(r), saved.mask_positions[at], k_blocks[at], v_blocks[at],
                        saved.coord_positions[owner], config.attention(), block_out, block_saved);
      detail::ring_merge(config.faults, out[at], lse[at], merged[at], block_out, block_saved.lse);
    });
    if (hop + 1 < k) {
      k_blocks = world.ring_send_recv(k_blocks);
      v_blocks = world.ring_send_recv(v_blocks);
    }
  }
  const Shape& chunk = saved.q_rot.global;
  const std::vector<std::string> inputs{saved.q_rot.name, saved.k_shard.name, saved.v_shard.name};
  saved.lse = dist_from_locals(world, config.part(AttentionPart::lse), chunk.without("head_dim"),
                               rows, std::move(lse));
  world.compare_boundary({.op = "ring_attention", .tensor = saved.lse.name, .inputs = inputs},
                         saved.lse);
  saved.attn =
      dist_from_locals(world, config.part(AttentionPart::attn), chunk, rows, std::move(out));
  world.compare_boundary({.op = "ring_attention", .tensor = saved.attn.name, .inputs = inputs},
                         saved.attn);
}

// From grad(NAME.attn) laid out like the rows (Shard(seq)).
template <typename T>
ShardedCoreGrads<T> sharded_ring_attention_backward(const World<T>& world,
                                                    const CpAttentionConfig& config,
                                                    const DistTensor<T>& dattn,
                                                    const CpShardedSaved<T>& saved) {
  const int k = world.group_size();
  const auto count = static_cast<std::size_t>(world.size());
  // Per rank: dq of its queries (batch, seq=mine, head, head_dim), accumulated over the hops; the
  // visiting KV block and its dK/dV accumulators (batch, kv=block, head, head_dim).
  std::vector<Tensor<T>> dq(count), dk(count), dv(count);
  std::vector<Tensor<T>> k_blocks = saved.k_blocks;
  std::vector<Tensor<T>> v_blocks = saved.v_blocks;
  world.for_each_rank([&](int r) {
    const auto at = static_cast<std::size_t>(r);
    dq[at] = Tensor<T>(saved.q_rot.local(r).shape());
    dk[at] = Tensor<T>(k_blocks[at].shape());
    dv[at] = Tensor<T>(v_blocks[at].shape());
  });
  for (int hop = 0; hop < k; ++hop) {
    world.for_each_rank([&](int r) {
      const auto at = static_cast<std::size_t>(r);
      const auto owner = static_cast<std::size_t>(detail::ring_owner(world.coord(r), hop, k));
      const std::vector<std::int64_t>& q_pos = saved.mask_positions[at];
      const std::vector<std::int64_t>& k_pos = saved.coord_positions[owner];
      const Tensor<T> lse =
          detail::ring_backward_lse(config, saved.q_rot.local(r), q_pos, k_blocks[at], v_blocks[at],
                                    k_pos, saved.lse.local(r));
      attention_block_backward(dattn.local(r), saved.q_rot.local(r), q_pos, k_blocks[at],
                               v_blocks[at], k_pos, saved.attn.local(r), lse, config.attention(),
                               dq[at], dk[at], dv[at]);
    });
    if (hop + 1 < k) {
      k_blocks = world.ring_send_recv(k_blocks);
      v_blocks = world.ring_send_recv(v_blocks);
    }
    // The accumulators follow their blocks; the k-th send brings each home to its owner.
    dk = world.ring_send_recv(dk);
    dv = world.ring_send_recv(dv);
  }
  // Each owner keeps its own chunk keys' gradients (the last rows of its block): the cache's
  // keys are detached.
  world.for_each_rank([&](int r) {
    const auto at = static_cast<std::size_t>(r);
    const std::int64_t own = saved.k_shard.local(r).shape().extent("kv");
    const std::int64_t cached = dk[at].shape().extent("kv") - own;
    dk[at] = slice_along(dk[at], "kv", cached, own);
    dv[at] = slice_along(dv[at], "kv", cached, own);
  });
  const std::vector<std::string> inputs{dattn.name,         saved.q_rot.name, saved.k_shard.name,
                                        saved.v_shard.name, saved.attn.name,  saved.lse.name};
  ShardedCoreGrads<T> grads;
  grads.q_rot = dist_from_locals(world, grad_name(saved.q_rot.name), saved.q_rot.global,
                                 saved.q_rot.layout, std::move(dq));
  world.compare_boundary(
      {.op = "ring_attention_backward", .tensor = grads.q_rot.name, .inputs = inputs}, grads.q_rot);
  grads.k = dist_from_locals(world, config.part_grad(AttentionPart::k_shard), saved.k_shard.global,
                             saved.k_shard.layout, std::move(dk));
  world.compare_boundary({.op = "ring_attention_backward",
                          .tensor = grads.k.name,
                          .dense = config.part_grad(saved.chunk_keys_part()),
                          .inputs = inputs},
                         grads.k);
  grads.v = dist_from_locals(world, config.part_grad(AttentionPart::v_shard), saved.v_shard.global,
                             saved.v_shard.layout, std::move(dv));
  world.compare_boundary({.op = "ring_attention_backward",
                          .tensor = grads.v.name,
                          .dense = config.part_grad(saved.chunk_values_part()),
                          .inputs = inputs},
                         grads.v);
  return grads;
}

}  // namespace shardsim
