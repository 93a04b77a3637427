// Backward of the context-parallel attention plan over one streamed chunk: the output
// projection, the mode's attention backward, inverse RoPE and the way back to the chunk's
// projections. Every rank ends with Replicate gradients of x and of the four weights. The
// cache is detached (attention/stream.hpp): gradients reaching cached keys stop there.
#pragma once

#include "ops/attention/allgather_plan.hpp"
#include "ops/attention/plan_common.hpp"
#include "ops/attention/ring_plan.hpp"
#include "ops/attention/ulysses_plan.hpp"

namespace shardsim {

// Gradients of one chunk's inputs and parameters, all Replicate. Parameter grads are fresh
// buffers (the caller accumulates them).
template <typename T>
struct CpAttentionGrads {
  DistTensor<T> x;   // (batch, seq=t, hidden)
  DistTensor<T> wq;  // (hidden, head, head_dim), likewise wk, wv
  DistTensor<T> wk;
  DistTensor<T> wv;
  DistTensor<T> wo;  // (head, head_dim, hidden)
};

namespace detail {

// grad(NAME.attn) = dy wo^T (batch, seq=t, head, head_dim) and grad(wo), both Replicate, on
// every rank. grad(wo) is written into `dwo_out`.
template <typename T>
DistTensor<T> cp_output_projection_backward(const World<T>& world, const DistTensor<T>& dy,
                                            const DistTensor<T>& wo,
                                            const CpAttentionSaved<T>& saved,
                                            DistTensor<T>& dwo_out) {
  const ChunkGeometry& geo = saved.geo;
  std::vector<Tensor<T>> dwo(static_cast<std::size_t>(world.size()));
  const DistTensor<T> dattn =
      replicated_phase(world, grad_name(saved.attn.name), saved.geo.chunk_shape(),
                       geo.on(Placement::replicate()),
                       {.op = backward_label(OpKind::sliding_window_attention),
                        .exact = true,
                        .inputs = {dy.name, saved.attn.name, wo.name}},
                       [&](int r) {
                         Tensor<T> dattn_local;
                         dwo[static_cast<std::size_t>(r)] = Tensor<T>(wo.global);
                         project_out_backward(dy.local(r), saved.attn.local(r), wo.local(r),
                                              dattn_local, dwo[static_cast<std::size_t>(r)]);
                         return dattn_local;
                       });
  dwo_out = dist_from_locals(world, grad_name(wo.name), wo.global, geo.param_grad, std::move(dwo));
  return dattn;
}

// The mode's attention backward, from grad(NAME.attn) (Replicate).
template <typename T>
CoreGrads<T> cp_core_backward(const World<T>& world, const CpAttentionConfig& config,
                              const ChunkGeometry& geo, const DistTensor<T>& dattn,
                              const CpAttentionSaved<T>& saved) {
  switch (config.mode) {
    case CpMode::allgather:
      return allgather_attention_backward(world, config, geo, dattn, saved);
    case CpMode::ring:
      return ring_attention_backward(world, config, geo, dattn, saved);
    case CpMode::ulysses:
      return ulysses_attention_backward(world, config, geo, dattn, saved);
  }
  return {};
}

// grad(NAME.k_cat) (batch, kv=L+t, head, head_dim), Replicate: inverse RoPE of each shard's own
// chunk keys, recorded as grad(NAME.k_cat_shard), then one all-gather. The cache keys pass
// unchanged (and stop: the cache is detached). Under rope_after_gather_wrong_offset the mode
// hands back a Replicate dk and the faulty rotation is undone on the gathered axis instead.
template <typename T>
DistTensor<T> cp_key_rope_backward(const World<T>& world, const CpAttentionConfig& config,
                                   const ChunkGeometry& geo, const CoreGrads<T>& core,
                                   const CpAttentionSaved<T>& saved) {
  const std::string dk_cat_name = config.part_grad(AttentionPart::k_cat);
  if (world.placement(core.k).is_replicate()) {
    const std::vector<std::int64_t> wrong = position_range(geo.first + geo.cached, geo.length);
    return replicated_phase(
        world, dk_cat_name, geo.kv_shape(), geo.on(Placement::replicate()),
        {.op = "rope_backward", .exact = true, .inputs = {core.k.name}}, [&](int r) {
          Tensor<T> dk_cat_local = core.k.local(r);
          rope_chunk_keys(dk_cat_local, geo.cached, wrong, config.rope("kv"), true);
          return dk_cat_local;
        });
  }
  // per rank: (batch, kv=slice, head, head_dim)
  std::vector<Tensor<T>> shards(static_cast<std::size_t>(world.size()));
  world.for_each_rank([&](int r) {
    Tensor<T> shard = core.k.local(r);
    rope_chunk_keys(shard, geo.first_chunk_local(world.coord(r)),
                    saved.rope_positions[static_cast<std::size_t>(r)], config.rope("kv"), true);
    shards[static_cast<std::size_t>(r)] = std::move(shard);
  });
  DistTensor<T> dk_shard =
      dist_from_locals(world, config.part_grad(AttentionPart::k_cat_shard), geo.kv_shape(),
                       geo.on(Placement::shard("kv")), std::move(shards));
  world.compare_boundary({.op = "rope_backward",
                          .tensor = dk_shard.name,
                          .dense = dk_cat_name,
                          .exact = true,
                          .inputs = {core.k.name}},
                         dk_shard);
  DistTensor<T> dk_cat =
      world.all_gather(dk_shard, {.tensor = dk_cat_name, .exact = true, .inputs = {dk_shard.name}});
  dk_cat.name = dk_cat_name;
  return dk_cat;
}

// The input projections on every rank, from grad(NAME.q), grad(NAME.k), grad(NAME.v)
// (batch, seq=t, head, head_dim): grad(x) = (dx_q + dx_k) + dx_v elementwise, and fresh
// grad(wq), grad(wk), grad(wv), all Replicate, into `grads`.
template <typename T>
void cp_input_projection_backward(const World<T>& world, const DistTensor<T>& x,
                                  const DistTensor<T>& wq, const DistTensor<T>& wk,
                                  const DistTensor<T>& wv, const DistTensor<T>& dq,
                                  const DistTensor<T>& dk, const DistTensor<T>& dv,
                                  const ChunkGeometry& geo, CpAttentionGrads<T>& grads) {
  const auto count = static_cast<std::size_t>(world.size());
  std::vector<Tensor<T>> dx(count), dwq(count), dwk(count), dwv(count);
  world.for_each_rank([&](int r) {
    const auto at = static_cast<std::size_t>(r);
    dwq[at] = Tensor<T>(wq.global);
    dwk[at] = Tensor<T>(wk.global);
    dwv[at] = Tensor<T>(wv.global);
    Tensor<T> dx_k;  // (batch, seq=t, hidden), like dx_v
    Tensor<T> dx_v;
    project_heads_backward(dq.local(r), x.local(r), wq.local(r), dx[at], dwq[at]);
    project_heads_backward(dk.local(r), x.local(r), wk.local(r), dx_k, dwk[at]);
    project_heads_backward(dv.local(r), x.local(r), wv.local(r), dx_v, dwv[at]);
    for (std::int64_t i = 0; i < dx[at].numel(); ++i) dx[at][i] = (dx[at][i] + dx_k[i]) + dx_v[i];
  });
  grads.x = dist_from_locals(world, grad_name(x.name), x.global, x.layout, std::move(dx));
  grads.wq = dist_from_locals(world, grad_name(wq.name), wq.global, geo.param_grad, std::move(dwq));
  grads.wk = dist_from_locals(world, grad_name(wk.name), wk.global, geo.param_grad, std::move(dwk));
  grads.wv = dist_from_locals(world, grad_name(wv.name), wv.global, geo.param_grad, std::move(dwv));
}

}  // namespace detail

// Backward of one chunk from dy = grad(NAME) (batch, seq=t, hidden), Replicate, and what
// cp_attention_forward saved. Records, in order: grad(NAME.attn), the mode's gradients,
// grad(NAME.q), grad(NAME.k_cat_shard), grad(NAME.k_cat), grad(NAME.v_all), grad(NAME.k),
// grad(NAME.v).
template <typename T>
CpAttentionGrads<T> cp_attention_backward(const World<T>& world, const DistTensor<T>& dy,
                                          const DistTensor<T>& x, const DistTensor<T>& wq,
                                          const DistTensor<T>& wk, const DistTensor<T>& wv,
                                          const DistTensor<T>& wo, const CpAttentionConfig& config,
                                          const CpAttentionSaved<T>& saved) {
  const ChunkGeometry& geo = saved.geo;
  const Shape chunk = geo.chunk_shape();
  CpAttentionGrads<T> grads;
  const DistTensor<T> dattn = detail::cp_output_projection_backward(world, dy, wo, saved, grads.wo);
  const CoreGrads<T> core = detail::cp_core_backward(world, config, geo, dattn, saved);

  // Queries: inverse RoPE on every rank.
  const std::vector<std::int64_t> q_pos = geo.q_pos();
  const DistTensor<T> dq = replicated_phase(
      world, config.part_grad(AttentionPart::q), chunk, geo.on(Placement::replicate()),
      {.op = "rope_backward", .exact = true, .inputs = {core.q_rot.name}}, [&](int r) {
        Tensor<T> dq_local;
        rope_backward(core.q_rot.local(r), q_pos, config.rope("seq"), dq_local);
        return dq_local;
      });

  // Keys and values over the whole KV axis, Replicate.
  const DistTensor<T> dk_cat = detail::cp_key_rope_backward(world, config, geo, core, saved);
  const std::string dv_all_name = config.part_grad(AttentionPart::v_all);
  DistTensor<T> dv_all =
      world.all_gather(core.v, {.tensor = dv_all_name, .exact = true, .inputs = {core.v.name}});
  dv_all.name = dv_all_name;

  // The chunk part of the KV axis (the last t keys), on every rank.
  auto chunk_part = [&](const DistTensor<T>& full, AttentionPart part) {
    return replicated_phase(
        world, config.part_grad(part), chunk, geo.on(Placement::replicate()),
        {.op = "kv_shard_backward", .exact = true, .inputs = {full.name}}, [&](int r) {
          return slice_along(full.local(r), "kv", geo.cached, geo.length)
              .reshaped(local_shape(chunk, geo.on(Placement::replicate()), world.mesh(), r));
        });
  };
  const DistTensor<T> dk = chunk_part(dk_cat, AttentionPart::k);
  const DistTensor<T> dv = chunk_part(dv_all, AttentionPart::v);

  detail::cp_input_projection_backward(world, x, wq, wk, wv, dq, dk, dv, saved.geo, grads);
  return grads;
}

}  // namespace shardsim
