// cp_mode = "allgather": every rank holds all queries; the RoPE'd KV shards are all-gathered
// once, and every rank runs the dense masked attention on the gathered K/V. RoPE is elementwise
// and the gathered arithmetic is the dense arithmetic in the same order, so every boundary here
// claims bitwise equality: any other bit is a bug, not rounding noise.
//
// Forward boundaries: NAME.k_all, NAME.v_all (all_gather -> Replicate), NAME.lse, NAME.attn.
// The cache written back is the tail of the gathered K/V: a local slice, no collective.
// Backward: each rank runs the dense attention backward on its replicated data; the gradients of
// the gathered K/V are sliced back to the ranks' shards (Replicate -> Shard(kv), local).
#pragma once

#include "ops/attention/plan_common.hpp"

namespace shardsim {

// Phase 6 forward in allgather mode: gathers saved.k_all and saved.v_all, runs the dense kernel
// on every rank and returns NAME.attn (batch, seq=t, head, head_dim), Replicate; fills saved.lse
// and saved.core. k_cat: NAME.k_cat, this rank's slice of cache ++ raw chunk keys (read only by
// the rope_after_gather_wrong_offset fault; saved.k_shard otherwise).
template <typename T>
DistTensor<T> allgather_attention_forward(const World<T>& world, const CpAttentionConfig& config,
                                          const ChunkGeometry& geo, const DistTensor<T>& k_cat,
                                          CpAttentionSaved<T>& saved) {
  const int ranks = world.size();
  const std::string k_all_name = config.part(AttentionPart::k_all);
  if (config.faults.rope_after_gather_wrong_offset) {
    // The bug: gather the raw chunk keys, then RoPE them once with the cache length counted
    // twice (gathered index g at P + g instead of P - L + g).
    DistTensor<T> gathered = world.all_gather(
        k_cat,
        {.tensor = config.part(AttentionPart::k_cat), .exact = true, .inputs = {k_cat.name}});
    const std::vector<std::int64_t> wrong = position_range(geo.first + geo.cached, geo.length);
    world.for_each_rank([&](int r) {
      rope_chunk_keys(gathered.local(r), geo.cached, wrong, config.rope("kv"), false);
    });
    gathered.name = k_all_name;
    saved.k_all = std::move(gathered);
    world.compare_boundary({.op = "rope",
                            .tensor = k_all_name,
                            .exact = true,
                            .inputs = {config.part(AttentionPart::k_cat)}},
                           saved.k_all);
  } else {
    saved.k_all = world.all_gather(
        saved.k_shard, {.tensor = k_all_name, .exact = true, .inputs = {saved.k_shard.name}});
    saved.k_all.name = k_all_name;
  }
  saved.v_all = world.all_gather(
      saved.v_shard,
      {.tensor = config.part(AttentionPart::v_all), .exact = true, .inputs = {saved.v_shard.name}});
  saved.v_all.name = config.part(AttentionPart::v_all);

  const std::vector<std::int64_t> q_pos = geo.q_pos();
  const std::vector<std::int64_t> k_pos = geo.k_pos();
  std::vector<Tensor<T>> out(static_cast<std::size_t>(ranks));  // (batch, seq=t, head, head_dim)
  std::vector<Tensor<T>> lse(static_cast<std::size_t>(ranks));  // (batch, seq=t, head)
  saved.core.assign(static_cast<std::size_t>(ranks), {});
  world.for_each_rank([&](int r) {
    const auto at = static_cast<std::size_t>(r);
    attention_forward(saved.q_rot.local(r), q_pos, saved.k_all.local(r), saved.v_all.local(r),
                      k_pos, config.attention(), out[at], saved.core[at]);
    lse[at] = saved.core[at].lse;
  });
  const std::vector<std::string> inputs{saved.q_rot.name, k_all_name, saved.v_all.name};
  saved.lse = dist_from_locals(world, config.part(AttentionPart::lse), geo.row_shape(),
                               geo.on(Placement::replicate()), lse);
  world.compare_boundary(
      {.op = "attention", .tensor = saved.lse.name, .exact = true, .inputs = inputs}, saved.lse);
  DistTensor<T> attn = dist_from_locals(world, config.part(AttentionPart::attn), geo.chunk_shape(),
                                        geo.on(Placement::replicate()), out);
  world.compare_boundary({.op = "attention", .tensor = attn.name, .exact = true, .inputs = inputs},
                         attn);
  return attn;
}

// The cache written back: the last C gathered keys and values (batch, kv=C, head, head_dim),
// Replicate, sliced on every rank.
template <typename T>
void allgather_write_cache(const World<T>& world, const ChunkGeometry& geo,
                           const CpAttentionSaved<T>& saved, CpKvCache<T>& cache) {
  const int ranks = world.size();
  std::vector<Tensor<T>> cache_k(static_cast<std::size_t>(ranks));
  std::vector<Tensor<T>> cache_v(static_cast<std::size_t>(ranks));
  const std::int64_t tail_begin = geo.cached + geo.length - geo.keep;
  world.for_each_rank([&](int r) {
    const auto at = static_cast<std::size_t>(r);
    cache_k[at] = slice_along(saved.k_all.local(r), "kv", tail_begin, geo.keep);
    cache_v[at] = slice_along(saved.v_all.local(r), "kv", tail_begin, geo.keep);
  });
  cache.k = dist_from_locals(world, cache.k.name, geo.cache_shape(), geo.on(Placement::replicate()),
                             cache_k);
  cache.v = dist_from_locals(world, cache.v.name, geo.cache_shape(), geo.on(Placement::replicate()),
                             cache_v);
}

// Phase 6 backward in allgather mode, from grad(NAME.attn) (Replicate): the dense attention
// backward on every rank, then the gathered dK/dV sliced back to the ranks' Shard(kv).
template <typename T>
CoreGrads<T> allgather_attention_backward(const World<T>& world, const CpAttentionConfig& config,
                                          const ChunkGeometry& geo, const DistTensor<T>& dattn,
                                          const CpAttentionSaved<T>& saved) {
  const int ranks = world.size();
  const std::vector<std::int64_t> q_pos = geo.q_pos();
  const std::vector<std::int64_t> k_pos = geo.k_pos();
  std::vector<Tensor<T>> dq(static_cast<std::size_t>(ranks));  // (batch, seq=t, head, head_dim)
  std::vector<Tensor<T>> dk(static_cast<std::size_t>(ranks));  // (batch, kv=L+t, head, head_dim)
  std::vector<Tensor<T>> dv(static_cast<std::size_t>(ranks));  // (batch, kv=L+t, head, head_dim)
  world.for_each_rank([&](int r) {
    const auto at = static_cast<std::size_t>(r);
    attention_backward(dattn.local(r), saved.q_rot.local(r), q_pos, saved.k_all.local(r),
                       saved.v_all.local(r), k_pos, saved.core[at], config.attention(), dq[at],
                       dk[at], dv[at]);
  });
  const std::vector<std::string> inputs{dattn.name, saved.q_rot.name, saved.k_all.name,
                                        saved.v_all.name};
  CoreGrads<T> grads;
  const Placement replicate = Placement::replicate();
  grads.q_rot = dist_from_locals(world, config.part_grad(AttentionPart::q_rot), geo.chunk_shape(),
                                 geo.on(replicate), dq);
  DistTensor<T> dk_all = dist_from_locals(world, config.part_grad(AttentionPart::k_all),
                                          geo.kv_shape(), geo.on(replicate), dk);
  DistTensor<T> dv_all = dist_from_locals(world, config.part_grad(AttentionPart::v_all),
                                          geo.kv_shape(), geo.on(replicate), dv);
  for (DistTensor<T>* grad : {&grads.q_rot, &dk_all, &dv_all}) {
    world.compare_boundary(
        {.op = "attention_backward", .tensor = grad->name, .exact = true, .inputs = inputs}, *grad);
  }
  if (config.faults.rope_after_gather_wrong_offset) {
    grads.k = std::move(dk_all);
  } else {
    grads.k = world.redistribute(dk_all, Placement::shard("kv"),
                                 {.tensor = config.part_grad(AttentionPart::k_shard),
                                  .dense = dk_all.name,
                                  .exact = true,
                                  .inputs = {dk_all.name}});
    grads.k.name = config.part_grad(AttentionPart::k_shard);
  }
  grads.v = world.redistribute(dv_all, Placement::shard("kv"),
                               {.tensor = config.part_grad(AttentionPart::v_shard),
                                .dense = dv_all.name,
                                .exact = true,
                                .inputs = {dv_all.name}});
  grads.v.name = config.part_grad(AttentionPart::v_shard);
  return grads;
}

}  // namespace shardsim
