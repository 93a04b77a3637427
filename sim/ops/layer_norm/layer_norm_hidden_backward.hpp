// The backward of the hidden-sharded LayerNorm plans (layer_norm_hidden_plan.hpp has the
// overview).
#pragma once

#include <string>
#include <vector>

#include "core/world.hpp"
#include "ops/add/add_plan.hpp"
#include "ops/layer_norm/layer_norm.hpp"
#include "ops/layer_norm/layer_norm_faults.hpp"
#include "ops/layer_norm/layer_norm_hidden_forward.hpp"
#include "ops/layer_norm/layer_norm_plan.hpp"

namespace shardsim {

namespace detail {

// redistribute: dy to the token layout of the forward, the row-sharded backward there, dx back
// to x's placement, recorded as `dense_dx`. dweight/dbias stay Partial(sum) over token slices.
template <typename T>
LayerNormShardedGrads<T> hidden_backward_redistribute(
    const World<T>& world, const DistTensor<T>& dy, const DistTensor<T>& x,
    const DistTensor<T>* weight, const DistTensor<T>* bias, const LayerNormParams& params,
    const std::string& token_axis, const LayerNormHiddenSaved<T>& saved, const std::string& dx_name,
    const std::string& dweight_name, const std::string& dbias_name, const std::string& dense_dx) {
  const std::string dy_tokens_name = moved_name(dy.name, token_axis);
  // x.global, Shard(token_axis).
  DistTensor<T> dy_tokens = world.all_to_all(
      dy, world.placement(saved.x_tokens),
      {.tensor = dy_tokens_name, .dense = dy.name, .exact = true, .inputs = {dy.name}});
  dy_tokens.name = dy_tokens_name;
  LayerNormShardedGrads<T> grads = layer_norm_row_sharded_backward(
      world, dy_tokens, saved.x_tokens, weight ? &saved.weight_full : nullptr,
      bias ? &saved.bias_full : nullptr, saved.stats, params, moved_name(dx_name, token_axis),
      dweight_name, dbias_name);
  std::vector<std::string> inputs{dy_tokens_name, saved.x_tokens.name};
  if (weight) inputs.push_back(saved.weight_full.name);
  grads.dx = world.all_to_all(grads.dx, world.placement(x),
                              {.tensor = dense_dx, .exact = true, .inputs = inputs});
  grads.dx.name = dx_name;
  return grads;
}

// sum_sumsq and welford: each rank's partial row reductions, all-reduced
// ("<dy>.sum_dnorm", "<dy>.sum_dnorm_norm"), then dx on each rank's slice; dweight/dbias
// accumulate locally over every token of the rank's features. grads: made by the caller.
template <typename T>
void hidden_backward_from_row_sums(const World<T>& world, const DistTensor<T>& dy,
                                   const DistTensor<T>& x, const DistTensor<T>* weight,
                                   const DistTensor<T>* bias, const LayerNormParams& params,
                                   const LayerNormShardedSaved<T>& stats,
                                   LayerNormShardedGrads<T>& grads) {
  const std::int64_t count = x.global.extent(params.axis);
  const Shape stats_shape = x.global.without(params.axis);  // (rows)
  auto local_of = [](const DistTensor<T>* t, int r) { return t ? &t->local(r) : nullptr; };
  auto stats_of = [&](int r) {
    return LayerNormSaved<T>{stats.mean.local(r), stats.rstd.local(r)};  // (rows)
  };
  // (rows), Partial: each rank's reductions over its slice of every row.
  DistTensor<T> sum_dnorm = world.make(part_name(dy.name, layer_norm_parts::sum_dnorm), stats_shape,
                                       x.layout.with(world.dim(), Placement::partial()));
  DistTensor<T> sum_dnorm_norm =
      world.make(part_name(dy.name, layer_norm_parts::sum_dnorm_norm), stats_shape,
                 x.layout.with(world.dim(), Placement::partial()));
  world.for_each_rank([&](int r) {
    layer_norm_backward_sums(dy.local(r), x.local(r), local_of(weight, r), stats_of(r), params,
                             x.slice(r, params.axis).valid(), sum_dnorm.local(r),
                             sum_dnorm_norm.local(r));
  });
  std::vector<std::string> inputs{x.name, dy.name};
  if (weight) inputs.push_back(weight->name);
  // (rows), Replicate: the full-row reductions.
  const DistTensor<T> total =
      world.all_reduce(sum_dnorm, {.op = "all_reduce", .tensor = sum_dnorm.name, .inputs = inputs});
  const DistTensor<T> total_norm = world.all_reduce(
      sum_dnorm_norm, {.op = "all_reduce", .tensor = sum_dnorm_norm.name, .inputs = inputs});
  world.for_each_rank([&](int r) {
    layer_norm_backward_apply(
        dy.local(r), x.local(r), local_of(weight, r), stats_of(r), total.local(r),
        total_norm.local(r), count, params, x.slice(r, params.axis).valid(), grads.dx.local(r),
        weight ? &grads.dweight.local(r) : nullptr, bias ? &grads.dbias.local(r) : nullptr);
  });
}

}  // namespace detail

// Backward of layer_norm_hidden_sharded. dy has x's placement. For the redistribute mode the
// moved-back dx is recorded as `dense_dx` (the oracle's contribution of this step to grad(x),
// which the caller stores beforehand); the other modes record the all-reduced row sums
// "<dy>.sum_dnorm" and "<dy>.sum_dnorm_norm". The caller records the returned gradients.
template <typename T>
LayerNormShardedGrads<T> layer_norm_hidden_sharded_backward(
    const World<T>& world, const DistTensor<T>& dy, const DistTensor<T>& x,
    const DistTensor<T>* weight, const DistTensor<T>* bias, const LayerNormParams& params,
    HiddenStats mode, const std::string& token_axis, const LayerNormFaults& faults,
    const LayerNormHiddenSaved<T>& saved, const std::string& dx_name,
    const std::string& dweight_name, const std::string& dbias_name, const std::string& dense_dx) {
  if (mode == HiddenStats::redistribute && !faults.hidden_shard_local_stats) {
    return detail::hidden_backward_redistribute(world, dy, x, weight, bias, params, token_axis,
                                                saved, dx_name, dweight_name, dbias_name, dense_dx);
  }
  LayerNormShardedGrads<T> grads;
  grads.dx = world.make(dx_name, x.global, x.layout);
  if (weight)
    grads.dweight = world.make(
        dweight_name, weight->global,
        row_sum_grad_layout(x.layout, dy.layout).with(world.dim(), world.placement(*weight)));
  if (bias)
    grads.dbias = world.make(
        dbias_name, bias->global,
        row_sum_grad_layout(x.layout, dy.layout).with(world.dim(), world.placement(*bias)));
  if (faults.hidden_shard_local_stats) {
    // The plan believes its slice is the whole row: the kernel backward on the slice.
    world.for_each_rank([&](int r) {
      const LayerNormSaved<T> local{saved.stats.mean.local(r), saved.stats.rstd.local(r)};
      layer_norm_backward(dy.local(r), x.local(r), weight ? &weight->local(r) : nullptr, local,
                          params, grads.dx.local(r), weight ? &grads.dweight.local(r) : nullptr,
                          bias ? &grads.dbias.local(r) : nullptr);
    });
  } else {
    detail::hidden_backward_from_row_sums(world, dy, x, weight, bias, params, saved.stats, grads);
  }
  zero_padding(grads.dx);
  return grads;
}

}  // namespace shardsim
