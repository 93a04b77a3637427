// Tensor-parallel plan for GQA attention (Megatron's ParallelAttention), on the step's mesh dim
// of P ranks. The input x is Replicate there (the all-gathered activation). The form follows the
// weights' placements (the loader checks them, ops/gqa_attention/entry.cpp):
//   none     wq, wk, wv, wo Replicate: each rank runs the dense kernel on its rows; y Replicate,
//            exact.
//   heads    wq Shard(head), wo Shard(head) (H / P query heads per rank, column- then
//            row-parallel): each rank runs the kernel on its query heads and the kv heads they
//            read. wk, wv Shard(kv_head) (KV / P kv heads per rank, KV a multiple of P), or
//            Replicate (every kv head on every rank; needed when P exceeds KV: each kv head is
//            then shared by P / KV ranks). y = attn wo is Partial(sum) over the ranks' heads.
// Each rank's q, k, v, RoPE, softmax and attn are the dense kernel's values on its heads, bit for
// bit (exact); y and every gradient summed over heads are reordered sums.
// Backward: grad(y) moved to Replicate on the dim (the full gradient of a Partial output), then
// the kernel's backward per rank. dx is Partial (each rank's heads' share). dwq, dwo keep their
// Shard(head); dwk, dwv keep Shard(kv_head), or, Replicate, are Partial: each rank adds only its
// query heads' share, zeros for the kv heads it does not read, so the runner's all-reduce of a
// Replicate parameter's gradient sums each kv head over exactly the ranks that share it.
// Fault gqa_kv_grad_unreduced: that Partial gradient is taken as Replicate, unreduced (each
// replica of wk, wv steps with its own share). Fault gqa_wrong_group: the kernel's mapping.
#pragma once

#include <string>
#include <vector>

#include "core/world.hpp"
#include "ops/add/add_plan.hpp"
#include "ops/gqa_attention/gqa.hpp"
#include "ops/op_list.hpp"

namespace shardsim {

// What the sharded forward keeps for its backward: each rank's activations.
template <typename T>
struct GqaSaved {
  std::vector<GqaActivations<T>> ranks;
};

// The rank's params: the global head numbers of its first query head and first kv head.
template <typename T>
GqaParams gqa_rank_params(const World<T>& world, const DistTensor<T>& wq, const DistTensor<T>& wk,
                          GqaParams params, int rank) {
  const int members = world.group_size();
  if (world.placement(wq).is_shard()) {
    params.head_offset = world.coord(rank) * (params.n_head / members);
  }
  if (world.placement(wk).is_shard()) {
    params.kv_offset = world.coord(rank) * (params.n_kv_head / members);
  }
  return params;
}

// Records NAME.q, .k, .v, .q_rot, .k_rot, .attn and NAME. REQUIRES: the placements above.
template <typename T>
DistTensor<T> gqa_sharded(const World<T>& world, const DistTensor<T>& x, const DistTensor<T>& wq,
                          const DistTensor<T>& wk, const DistTensor<T>& wv, const DistTensor<T>& wo,
                          const GqaParams& params, const std::string& output, GqaSaved<T>& saved) {
  const int dim = world.dim();
  const bool heads = world.placement(wq).is_shard();
  SHARDSIM_ASSERT(world.placement(x).is_replicate(), "gqa_attention: x Replicate on its dim");
  saved.ranks.assign(static_cast<std::size_t>(x.ranks()), {});
  world.for_each_rank([&](int r) {
    gqa_forward(x.local(r), wq.local(r), wk.local(r), wv.local(r), wo.local(r),
                gqa_rank_params(world, wq, wk, params, r),
                saved.ranks[static_cast<std::size_t>(r)]);
  });
  const Shape& xs = x.global;
  const std::int64_t hd = wq.global.extent("head_dim");
  const Shape q_shape({xs[0], xs[1], {"head", params.n_head}, {"head_dim", hd}});
  const Shape kv_shape({xs[0], xs[1], {"kv_head", params.n_kv_head}, {"head_dim", hd}});
  const Layout q_layout = x.layout.with(dim, world.placement(wq));
  const Layout kv_layout = x.layout.with(dim, world.placement(wk));
  const auto record = [&](const char* part, const Shape& shape, const Layout& layout,
                          Tensor<T> GqaActivations<T>::*member, std::vector<std::string> inputs) {
    const std::string name = part_name(output, part);
    DistTensor<T> t = world.make(name, shape, layout);
    world.for_each_rank(
        [&](int r) { t.local(r) = saved.ranks[static_cast<std::size_t>(r)].*member; });
    world.compare_boundary(
        {.op = op_label(OpKind::gqa_attention), .tensor = name, .exact = true, .inputs = inputs},
        t);
  };
  record("q", q_shape, q_layout, &GqaActivations<T>::q, {x.name, wq.name});
  record("k", kv_shape, kv_layout, &GqaActivations<T>::k, {x.name, wk.name});
  record("v", kv_shape, kv_layout, &GqaActivations<T>::v, {x.name, wv.name});
  record("q_rot", q_shape, q_layout, &GqaActivations<T>::q_rot, {part_name(output, "q")});
  record("k_rot", kv_shape, kv_layout, &GqaActivations<T>::k_rot, {part_name(output, "k")});
  record("attn", q_shape, q_layout, &GqaActivations<T>::attn,
         {part_name(output, "q_rot"), part_name(output, "k_rot"), part_name(output, "v")});
  DistTensor<T> y = world.make(
      output, xs, x.layout.with(dim, heads ? Placement::partial() : Placement::replicate()));
  world.for_each_rank([&](int r) { y.local(r) = saved.ranks[static_cast<std::size_t>(r)].y; });
  world.compare_boundary({.op = op_label(OpKind::gqa_attention),
                          .tensor = output,
                          .exact = !heads,
                          .inputs = {part_name(output, "attn"), wo.name}},
                         y);
  return y;
}

template <typename T>
struct GqaShardedGrads {
  DistTensor<T> dy;  // grad(y) moved to Replicate on the step's dim
  DistTensor<T> dx, dwq, dwk, dwv, dwo;
  bool heads = false;  // the heads form: dx Partial, a Replicate kv weight's gradient Partial
};

// grad(y) moved to Replicate on the step's dim, and the zero gradients laid out as above (also
// the context-parallel plan's, gqa_cp_plan.hpp).
template <typename T>
GqaShardedGrads<T> gqa_grad_tensors(const World<T>& world, const DistTensor<T>& dy_held,
                                    const DistTensor<T>& x, const DistTensor<T>& wq,
                                    const DistTensor<T>& wk, const DistTensor<T>& wv,
                                    const DistTensor<T>& wo, bool kv_grad_unreduced) {
  const int dim = world.dim();
  GqaShardedGrads<T> g;
  g.heads = world.placement(wq).is_shard();
  g.dy = align_grad(
      world, dy_held,
      elementwise_grad_target(x.layout, dy_held.layout).with(dim, Placement::replicate()));
  // Off the step's dim, the weights' gradients sum over the rows a member holds.
  Layout rows = wq.layout;
  for (int d = 0; d < x.layout.ndim(); ++d) {
    const bool whole = x.layout.on(d).is_replicate() && g.dy.layout.on(d).is_replicate();
    rows.dims[d] = whole ? Placement::replicate() : Placement::partial();
  }
  const auto weight_grad = [&](const DistTensor<T>& w, bool kv) {
    Placement on = world.placement(w);
    if (g.heads && on.is_replicate() && !(kv && kv_grad_unreduced)) on = Placement::partial();
    return world.make(grad_name(w.name), w.global, rows.with(dim, on));
  };
  g.dwq = weight_grad(wq, false);
  g.dwk = weight_grad(wk, true);
  g.dwv = weight_grad(wv, true);
  g.dwo = weight_grad(wo, false);
  g.dx = world.make(grad_name(x.name), x.global,
                    g.dy.layout.with(dim, g.heads ? Placement::partial() : Placement::replicate()));
  return g;
}

// The gradients, named grad(x), grad(wq), ... by the caller's `names` (x, wq, wk, wv, wo).
template <typename T>
GqaShardedGrads<T> gqa_backward_sharded(const World<T>& world, const DistTensor<T>& dy_held,
                                        const DistTensor<T>& x, const DistTensor<T>& wq,
                                        const DistTensor<T>& wk, const DistTensor<T>& wv,
                                        const DistTensor<T>& wo, const GqaParams& params,
                                        const GqaSaved<T>& saved, bool kv_grad_unreduced) {
  GqaShardedGrads<T> g = gqa_grad_tensors(world, dy_held, x, wq, wk, wv, wo, kv_grad_unreduced);
  world.for_each_rank([&](int r) {
    GqaGrads<T> grads;
    gqa_backward(g.dy.local(r), x.local(r), wq.local(r), wk.local(r), wv.local(r), wo.local(r),
                 saved.ranks[static_cast<std::size_t>(r)],
                 gqa_rank_params(world, wq, wk, params, r), grads, g.dwq.local(r), g.dwk.local(r),
                 g.dwv.local(r), g.dwo.local(r));
    g.dx.local(r) = std::move(grads.x);
  });
  return g;
}

}  // namespace shardsim
