// cp_mode = "ulysses" with sequence-sharded queries (attention/sharded_plan.hpp): all-to-alls
// swap each rank's own tokens (Shard(seq), Shard(kv) with x's split: chunk, balanced or zigzag)
// for a head group over the whole sequence (Shard(head), torch.chunk of the heads as in
// ulysses_plan.hpp), the dense kernel runs per head group on the whole sequence in the dense
// order, and an all-to-all swaps the output back to the ranks' own tokens.
//
// The all-to-alls move values by global position (copy_overlap), so a zigzag share arrives in
// global order and the kernel sees exactly the oracle's operands: every boundary here claims
// bitwise equality, forward and backward (attention_backward per head group from the saved
// statistics, then the conjugate all-to-alls).
//
// Forward boundaries: NAME.q_heads (all_to_all Shard(seq) -> Shard(head), dense NAME.q_rot),
// NAME.k_heads, NAME.v_heads (all_to_all Shard(kv) -> Shard(head)), NAME.lse and
// NAME.attn_heads (Shard(head)), NAME.attn (all_to_all Shard(head) -> Shard(seq)).
// Backward: grad(NAME.attn_heads) (all_to_all), grad(NAME.q_heads), grad(NAME.k_heads),
// grad(NAME.v_heads) (the kernel), grad(NAME.q_rot), grad(NAME.k_shard), grad(NAME.v_shard)
// (all_to_all back).
#pragma once

#include "ops/attention/sharded_common.hpp"

namespace shardsim {

// Fills saved.q_heads, k_heads, v_heads, k_group, v_group, core, lse (Shard(head)) and attn
// (Shard(seq) laid out as `rows`, x's layout) from saved.q_rot, saved.k_shard, saved.v_shard and
// the head group's cache (cache.k_heads, cache.v_heads: the keys before the chunk's).
template <typename T>
void sharded_ulysses_attention_forward(const World<T>& world, const CpAttentionConfig& config,
                                       const Layout& rows, const CpShardedCache<T>& cache,
                                       CpShardedSaved<T>& saved) {
  const auto count = static_cast<std::size_t>(world.size());
  const Placement heads = Placement::shard("head");
  auto to_heads = [&](const DistTensor<T>& in, AttentionPart part, AttentionPart dense) {
    DistTensor<T> out = world.all_to_all(in, heads,
                                         {.tensor = config.part(part),
                                          .dense = config.part(dense),
                                          .exact = true,
                                          .inputs = {in.name}});
    out.name = config.part(part);
    return out;
  };
  saved.q_heads = to_heads(saved.q_rot, AttentionPart::q_heads, AttentionPart::q_rot);
  saved.k_heads = to_heads(saved.k_shard, AttentionPart::k_heads, saved.chunk_keys_part());
  saved.v_heads = to_heads(saved.v_shard, AttentionPart::v_heads, saved.chunk_values_part());

  const Shape& chunk = saved.q_rot.global;  // (batch, seq=n, head, head_dim)
  const std::vector<std::int64_t> q_pos = saved.query_positions();
  const std::vector<std::int64_t> k_pos = saved.kv_positions();
  // Per rank, over its head group g: the whole KV axis (batch, kv=L+n, head=g, head_dim), the
  // cache ++ the chunk's; out (batch, seq=n, head=g, head_dim), lse (batch, seq=n, head=g).
  std::vector<Tensor<T>> out(count), lse(count);
  saved.k_group.assign(count, {});
  saved.v_group.assign(count, {});
  saved.core.assign(count, {});
  world.for_each_rank([&](int r) {
    const auto at = static_cast<std::size_t>(r);
    saved.k_group[at] = concat_along(cache.k_heads.local(r), saved.k_heads.local(r), "kv");
    saved.v_group[at] = concat_along(cache.v_heads.local(r), saved.v_heads.local(r), "kv");
    attention_forward(saved.q_heads.local(r), q_pos, saved.k_group[at], saved.v_group[at], k_pos,
                      config.attention(), out[at], saved.core[at]);
    lse[at] = saved.core[at].lse;
  });
  const int cp = world.dim();
  std::vector<std::string> inputs{saved.q_heads.name, saved.k_heads.name, saved.v_heads.name};
  if (saved.cached > 0) {
    inputs.push_back(config.part(AttentionPart::cache_k));
    inputs.push_back(config.part(AttentionPart::cache_v));
  }
  saved.lse = dist_from_locals(world, config.part(AttentionPart::lse), chunk.without("head_dim"),
                               rows.with(cp, heads), std::move(lse));
  world.compare_boundary(
      {.op = "attention", .tensor = saved.lse.name, .exact = true, .inputs = inputs}, saved.lse);
  DistTensor<T> attn_heads = dist_from_locals(world, config.part(AttentionPart::attn_heads), chunk,
                                              rows.with(cp, heads), std::move(out));
  world.compare_boundary({.op = "attention",
                          .tensor = attn_heads.name,
                          .dense = config.part(AttentionPart::attn),
                          .exact = true,
                          .inputs = inputs},
                         attn_heads);
  saved.attn = world.all_to_all(
      attn_heads, rows.on(cp),
      {.tensor = config.part(AttentionPart::attn), .exact = true, .inputs = {attn_heads.name}});
  saved.attn.name = config.part(AttentionPart::attn);
}

// From grad(NAME.attn) laid out like the rows (Shard(seq)).
template <typename T>
ShardedCoreGrads<T> sharded_ulysses_attention_backward(const World<T>& world,
                                                       const CpAttentionConfig& config,
                                                       const DistTensor<T>& dattn,
                                                       const CpShardedSaved<T>& saved) {
  const auto count = static_cast<std::size_t>(world.size());
  const Placement heads = Placement::shard("head");
  const std::string dattn_heads_name = config.part_grad(AttentionPart::attn_heads);
  DistTensor<T> dattn_heads = world.all_to_all(
      dattn, heads,
      {.tensor = dattn_heads_name, .dense = dattn.name, .exact = true, .inputs = {dattn.name}});
  dattn_heads.name = dattn_heads_name;

  const std::vector<std::int64_t> q_pos = saved.query_positions();
  const std::vector<std::int64_t> k_pos = saved.kv_positions();
  const std::int64_t length = saved.k_heads.global.extent("kv");
  // Per rank, over its head group g: dq (batch, seq=n, head=g, head_dim), dk and dv
  // (batch, kv=n, head=g, head_dim): the chunk's keys only (the cache is detached).
  std::vector<Tensor<T>> dq(count), dk(count), dv(count);
  world.for_each_rank([&](int r) {
    const auto at = static_cast<std::size_t>(r);
    attention_backward(dattn_heads.local(r), saved.q_heads.local(r), q_pos, saved.k_group[at],
                       saved.v_group[at], k_pos, saved.core[at], config.attention(), dq[at], dk[at],
                       dv[at]);
    if (saved.cached > 0) {
      dk[at] = slice_along(dk[at], "kv", saved.cached, length);
      dv[at] = slice_along(dv[at], "kv", saved.cached, length);
    }
  });
  // The cached keys and values are read here too (dp = dO v_j over every key): a cache that
  // differs from the oracle's voids the exactness claim, as in the forward.
  std::vector<std::string> inputs{dattn_heads_name, saved.q_heads.name, saved.k_heads.name,
                                  saved.v_heads.name};
  if (saved.cached > 0) {
    inputs.push_back(config.part(AttentionPart::cache_k));
    inputs.push_back(config.part(AttentionPart::cache_v));
  }
  // Each head-group gradient, recorded against its dense gradient, then moved back to the
  // ranks' own tokens (`back`: the layout of the tensor it is the gradient of).
  auto move_back = [&](const DistTensor<T>& of_heads, std::vector<Tensor<T>> locals,
                       AttentionPart dense, const DistTensor<T>& back, std::string back_name) {
    DistTensor<T> grads = dist_from_locals(world, grad_name(of_heads.name), of_heads.global,
                                           of_heads.layout, std::move(locals));
    world.compare_boundary({.op = "attention_backward",
                            .tensor = grads.name,
                            .dense = config.part_grad(dense),
                            .exact = true,
                            .inputs = inputs},
                           grads);
    DistTensor<T> moved = world.all_to_all(grads, back.layout.on(world.dim()),
                                           {.tensor = back_name,
                                            .dense = config.part_grad(dense),
                                            .exact = true,
                                            .inputs = {grads.name}});
    moved.name = std::move(back_name);
    return moved;
  };
  ShardedCoreGrads<T> out;
  out.q_rot = move_back(saved.q_heads, std::move(dq), AttentionPart::q_rot, saved.q_rot,
                        grad_name(saved.q_rot.name));
  out.k = move_back(saved.k_heads, std::move(dk), saved.chunk_keys_part(), saved.k_shard,
                    config.part_grad(AttentionPart::k_shard));
  out.v = move_back(saved.v_heads, std::move(dv), saved.chunk_values_part(), saved.v_shard,
                    config.part_grad(AttentionPart::v_shard));
  return out;
}

}  // namespace shardsim
