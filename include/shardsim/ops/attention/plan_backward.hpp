// Backward of the context-parallel attention plan (declared in attention/plan.hpp): the output
// projection, the mode's attention backward, inverse RoPE and the way back to the chunk's
// projections. Every rank ends with Replicate gradients of x and of the four weights.
#pragma once

#include "shardsim/ops/attention/plan.hpp"

namespace shardsim {

template <typename T>
CpAttentionGrads<T> cp_attention_backward(const World<T>& world, const DistTensor<T>& dy,
                                          const DistTensor<T>& x, const DistTensor<T>& wq,
                                          const DistTensor<T>& wk, const DistTensor<T>& wv,
                                          const DistTensor<T>& wo, const CpAttentionConfig& config,
                                          const CpAttentionSaved<T>& saved) {
  const ChunkGeometry& geo = saved.geo;
  const int ranks = world.size();
  const auto count = static_cast<std::size_t>(ranks);
  const Shape chunk = geo.chunk_shape();
  CpAttentionGrads<T> grads;

  // grad(NAME.attn) and dwo, on every rank.
  std::vector<Tensor<T>> dwo(count);
  const DistTensor<T> dattn =
      replicated_phase(world, grad_name(saved.attn.name), chunk,
                       {.op = "sliding_window_attention_backward",
                        .exact = true,
                        .inputs = {dy.name, saved.attn.name, wo.name}},
                       [&](int r) {
                         Tensor<T> d;
                         dwo[static_cast<std::size_t>(r)] = Tensor<T>(wo.global);
                         project_out_backward(dy.local(r), saved.attn.local(r), wo.local(r), d,
                                              dwo[static_cast<std::size_t>(r)]);
                         return d;
                       });
  grads.wo =
      dist_from_locals(grad_name(wo.name), wo.global, Placement::replicate(), std::move(dwo));

  CoreGrads<T> core;
  switch (config.mode) {
    case CpMode::allgather:
      core = allgather_attention_backward(world, config, geo, dattn, saved);
      break;
    case CpMode::ring:
      core = ring_attention_backward(world, config, geo, dattn, saved);
      break;
    case CpMode::ulysses:
      core = ulysses_attention_backward(world, config, geo, dattn, saved);
      break;
  }

  // Queries: inverse RoPE on every rank.
  const std::vector<std::int64_t> q_pos = geo.q_pos();
  const DistTensor<T> dq = replicated_phase(
      world, config.part_grad(AttentionPart::q), chunk,
      {.op = "rope_backward", .exact = true, .inputs = {core.q_rot.name}}, [&](int r) {
        Tensor<T> d;
        rope_backward(core.q_rot.local(r), q_pos, config.rope("seq"), d);
        return d;
      });

  // Keys: inverse RoPE of each shard's own chunk keys (the cache keys pass unchanged and stop:
  // the cache is detached), then one all-gather.
  const std::string dk_cat_name = config.part_grad(AttentionPart::k_cat);
  DistTensor<T> dk_cat;
  if (core.k.placement.is_replicate()) {
    // rope_after_gather_wrong_offset: undo the faulty RoPE on the gathered axis.
    const std::vector<std::int64_t> wrong = position_range(geo.first + geo.cached, geo.length);
    dk_cat = replicated_phase(world, dk_cat_name, geo.kv_shape(),
                              {.op = "rope_backward", .exact = true, .inputs = {core.k.name}},
                              [&](int r) {
                                Tensor<T> d = core.k.local(r);
                                rope_chunk_keys(d, geo.cached, wrong, config.rope("kv"), true);
                                return d;
                              });
  } else {
    std::vector<Tensor<T>> parts(count);
    world.for_each_rank([&](int r) {
      Tensor<T> d = core.k.local(r);
      rope_chunk_keys(d, geo.first_chunk_local(r),
                      saved.rope_positions[static_cast<std::size_t>(r)], config.rope("kv"), true);
      parts[static_cast<std::size_t>(r)] = std::move(d);
    });
    const DistTensor<T> shard =
        dist_from_locals(config.part_grad(AttentionPart::k_cat_shard), geo.kv_shape(),
                         Placement::shard("kv"), std::move(parts));
    world.compare_boundary({.op = "rope_backward",
                            .tensor = shard.name,
                            .dense = dk_cat_name,
                            .exact = true,
                            .inputs = {core.k.name}},
                           shard);
    dk_cat =
        world.all_gather(shard, {.tensor = dk_cat_name, .exact = true, .inputs = {shard.name}});
    dk_cat.name = dk_cat_name;
  }
  DistTensor<T> dv_all = world.all_gather(
      core.v,
      {.tensor = config.part_grad(AttentionPart::v_all), .exact = true, .inputs = {core.v.name}});
  dv_all.name = config.part_grad(AttentionPart::v_all);

  // The chunk part of the KV axis, on every rank.
  auto chunk_part = [&](const DistTensor<T>& full, AttentionPart part) {
    return replicated_phase(
        world, config.part_grad(part), chunk,
        {.op = "kv_shard_backward", .exact = true, .inputs = {full.name}}, [&](int r) {
          return slice_along(full.local(r), "kv", geo.cached, geo.length).reshaped(chunk);
        });
  };
  const DistTensor<T> dk = chunk_part(dk_cat, AttentionPart::k);
  const DistTensor<T> dv = chunk_part(dv_all, AttentionPart::v);

  // The input projections, on every rank: dx = (dx_q + dx_k) + dx_v.
  std::vector<Tensor<T>> dx(count), dwq(count), dwk(count), dwv(count);
  world.for_each_rank([&](int r) {
    const auto at = static_cast<std::size_t>(r);
    dwq[at] = Tensor<T>(wq.global);
    dwk[at] = Tensor<T>(wk.global);
    dwv[at] = Tensor<T>(wv.global);
    Tensor<T> dx_k;
    Tensor<T> dx_v;
    project_heads_backward(dq.local(r), x.local(r), wq.local(r), dx[at], dwq[at]);
    project_heads_backward(dk.local(r), x.local(r), wk.local(r), dx_k, dwk[at]);
    project_heads_backward(dv.local(r), x.local(r), wv.local(r), dx_v, dwv[at]);
    for (std::int64_t i = 0; i < dx[at].numel(); ++i) dx[at][i] = (dx[at][i] + dx_k[i]) + dx_v[i];
  });
  const Placement replicate = Placement::replicate();
  grads.x = dist_from_locals(grad_name(x.name), x.global, replicate, std::move(dx));
  grads.wq = dist_from_locals(grad_name(wq.name), wq.global, replicate, std::move(dwq));
  grads.wk = dist_from_locals(grad_name(wk.name), wk.global, replicate, std::move(dwk));
  grads.wv = dist_from_locals(grad_name(wv.name), wv.global, replicate, std::move(dwv));
  return grads;
}

}  // namespace shardsim
