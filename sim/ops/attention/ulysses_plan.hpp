// cp_mode = "ulysses" (DeepSpeed-Ulysses, Jacobs et al. 2023): an all-to-all swaps the KV axis
// shards for head shards, full-sequence attention runs per head group, and an all-to-all swaps
// back.
//
// Head groups: the head axis is split with torch.chunk semantics (c = ceil(n_head / k); rank r
// owns heads [min(n, r c), min(n, (r+1) c))), so heads that do not divide by the group size give
// an uneven layout (3 heads over 2 ranks: 2, 1; over 4 ranks: 1, 1, 1, 0) and a rank with no
// head idles. Attention is independent per head and runs the dense kernel on whole heads, in the
// dense order, so every boundary here claims bitwise equality with the dense one.
//
// Forward boundaries: NAME.q_heads (Replicate -> Shard(head), local: the queries are already on
// every rank), NAME.k_heads, NAME.v_heads (all_to_all Shard(kv) -> Shard(head)), NAME.lse and
// NAME.attn_heads (Shard(head)), NAME.attn_seq (all_to_all Shard(head) -> Shard(seq)), NAME.attn
// (all_gather -> Replicate). The cache written back stays with the head groups (Shard(head),
// no collective); the next chunk all-gathers it before splitting the KV axis again.
// Backward: the conjugate collectives in reverse order around the same per-head kernel.
#pragma once

#include "ops/attention/plan_common.hpp"

namespace shardsim {

// Phase 6 forward in ulysses mode: returns NAME.attn (batch, seq=t, head, head_dim), Replicate;
// fills saved.q_part, saved.k_heads, saved.v_heads, saved.lse, saved.attn_part and saved.core;
// writes the cache back per head group, Shard(head).
template <typename T>
DistTensor<T> ulysses_attention_forward(const World<T>& world, const CpAttentionConfig& config,
                                        const ChunkGeometry& geo, CpAttentionSaved<T>& saved,
                                        CpKvCache<T>& cache) {
  const int ranks = world.size();
  const auto count = static_cast<std::size_t>(ranks);
  const Placement heads = Placement::shard("head");
  saved.q_part = world.redistribute(saved.q_rot, heads,
                                    {.tensor = config.part(AttentionPart::q_heads),
                                     .dense = saved.q_rot.name,
                                     .exact = true,
                                     .inputs = {saved.q_rot.name}});
  saved.q_part.name = config.part(AttentionPart::q_heads);
  saved.k_heads = world.all_to_all(saved.k_shard, heads,
                                   {.tensor = config.part(AttentionPart::k_heads),
                                    .dense = config.part(AttentionPart::k_all),
                                    .exact = true,
                                    .inputs = {saved.k_shard.name}});
  saved.k_heads.name = config.part(AttentionPart::k_heads);
  saved.v_heads = world.all_to_all(saved.v_shard, heads,
                                   {.tensor = config.part(AttentionPart::v_heads),
                                    .dense = config.part(AttentionPart::v_all),
                                    .exact = true,
                                    .inputs = {saved.v_shard.name}});
  saved.v_heads.name = config.part(AttentionPart::v_heads);

  const std::vector<std::int64_t> q_pos = geo.q_pos();
  const std::vector<std::int64_t> k_pos = geo.k_pos();
  // Per rank, over its head group g: out (batch, seq=t, head=g, head_dim), lse (batch, seq=t,
  // head=g) and the cache written back (batch, kv=C, head=g, head_dim).
  std::vector<Tensor<T>> out(count), lse(count), cache_k(count), cache_v(count);
  saved.core.assign(count, {});
  const std::int64_t tail_begin = geo.cached + geo.length - geo.keep;
  world.for_each_rank([&](int r) {
    const auto at = static_cast<std::size_t>(r);
    attention_forward(saved.q_part.local(r), q_pos, saved.k_heads.local(r), saved.v_heads.local(r),
                      k_pos, config.attention(), out[at], saved.core[at]);
    lse[at] = saved.core[at].lse;
    cache_k[at] = slice_along(saved.k_heads.local(r), "kv", tail_begin, geo.keep);
    cache_v[at] = slice_along(saved.v_heads.local(r), "kv", tail_begin, geo.keep);
  });
  const std::vector<std::string> inputs{saved.q_part.name, saved.k_heads.name, saved.v_heads.name};
  saved.lse =
      dist_from_locals(world, config.part(AttentionPart::lse), geo.row_shape(), geo.on(heads), lse);
  world.compare_boundary(
      {.op = "attention", .tensor = saved.lse.name, .exact = true, .inputs = inputs}, saved.lse);
  saved.attn_part = dist_from_locals(world, config.part(AttentionPart::attn_heads),
                                     geo.chunk_shape(), geo.on(heads), out);
  world.compare_boundary({.op = "attention",
                          .tensor = saved.attn_part.name,
                          .dense = config.part(AttentionPart::attn),
                          .exact = true,
                          .inputs = inputs},
                         saved.attn_part);
  DistTensor<T> attn_seq = world.all_to_all(saved.attn_part, Placement::shard("seq"),
                                            {.tensor = config.part(AttentionPart::attn_seq),
                                             .dense = config.part(AttentionPart::attn),
                                             .exact = true,
                                             .inputs = {saved.attn_part.name}});
  attn_seq.name = config.part(AttentionPart::attn_seq);
  DistTensor<T> attn = world.all_gather(
      attn_seq,
      {.tensor = config.part(AttentionPart::attn), .exact = true, .inputs = {attn_seq.name}});
  attn.name = config.part(AttentionPart::attn);
  cache.k = dist_from_locals(world, cache.k.name, geo.cache_shape(), geo.on(heads), cache_k);
  cache.v = dist_from_locals(world, cache.v.name, geo.cache_shape(), geo.on(heads), cache_v);
  return attn;
}

// Phase 6 backward in ulysses mode, from grad(NAME.attn) (Replicate).
template <typename T>
CoreGrads<T> ulysses_attention_backward(const World<T>& world, const CpAttentionConfig& config,
                                        const ChunkGeometry& geo, const DistTensor<T>& dattn,
                                        const CpAttentionSaved<T>& saved) {
  const int ranks = world.size();
  const auto count = static_cast<std::size_t>(ranks);
  const Placement heads = Placement::shard("head");
  const std::string dattn_seq_name = config.part_grad(AttentionPart::attn_seq);
  const DistTensor<T> dattn_seq = world.redistribute(
      dattn, Placement::shard("seq"),
      {.tensor = dattn_seq_name, .dense = dattn.name, .exact = true, .inputs = {dattn.name}});
  const std::string dattn_heads_name = grad_name(saved.attn_part.name);
  DistTensor<T> dattn_heads = world.all_to_all(
      dattn_seq, heads,
      {.tensor = dattn_heads_name, .dense = dattn.name, .exact = true, .inputs = {dattn_seq_name}});
  dattn_heads.name = dattn_heads_name;

  const std::vector<std::int64_t> q_pos = geo.q_pos();
  const std::vector<std::int64_t> k_pos = geo.k_pos();
  // Per rank, over its head group g: dq (batch, seq=t, head=g, head_dim), dk and dv
  // (batch, kv=L+t, head=g, head_dim).
  std::vector<Tensor<T>> dq(count), dk(count), dv(count);
  world.for_each_rank([&](int r) {
    const auto at = static_cast<std::size_t>(r);
    attention_backward(dattn_heads.local(r), saved.q_part.local(r), q_pos, saved.k_heads.local(r),
                       saved.v_heads.local(r), k_pos, saved.core[at], config.attention(), dq[at],
                       dk[at], dv[at]);
  });
  const std::vector<std::string> inputs{dattn_heads_name, saved.q_part.name, saved.k_heads.name,
                                        saved.v_heads.name};
  DistTensor<T> dq_heads =
      dist_from_locals(world, grad_name(saved.q_part.name), geo.chunk_shape(), geo.on(heads), dq);
  DistTensor<T> dk_heads =
      dist_from_locals(world, grad_name(saved.k_heads.name), geo.kv_shape(), geo.on(heads), dk);
  DistTensor<T> dv_heads =
      dist_from_locals(world, grad_name(saved.v_heads.name), geo.kv_shape(), geo.on(heads), dv);
  // Each head-sharded gradient and the dense gradient it is a Shard(head) of.
  const std::string dense_of[3] = {config.part_grad(AttentionPart::q_rot),
                                   config.part_grad(AttentionPart::k_all),
                                   config.part_grad(AttentionPart::v_all)};
  DistTensor<T>* head_grads[3] = {&dq_heads, &dk_heads, &dv_heads};
  for (int i = 0; i < 3; ++i) {
    world.compare_boundary({.op = "attention_backward",
                            .tensor = head_grads[i]->name,
                            .dense = dense_of[i],
                            .exact = true,
                            .inputs = inputs},
                           *head_grads[i]);
  }
  CoreGrads<T> grads;
  grads.q_rot =
      world.all_gather(dq_heads, {.tensor = dense_of[0], .exact = true, .inputs = {dq_heads.name}});
  grads.q_rot.name = dense_of[0];
  const Placement kv = Placement::shard("kv");
  grads.k = world.all_to_all(dk_heads, kv,
                             {.tensor = config.part_grad(AttentionPart::k_shard),
                              .dense = dense_of[1],
                              .exact = true,
                              .inputs = {dk_heads.name}});
  grads.k.name = config.part_grad(AttentionPart::k_shard);
  grads.v = world.all_to_all(dv_heads, kv,
                             {.tensor = config.part_grad(AttentionPart::v_shard),
                              .dense = dense_of[2],
                              .exact = true,
                              .inputs = {dv_heads.name}});
  grads.v.name = config.part_grad(AttentionPart::v_shard);
  return grads;
}

}  // namespace shardsim
