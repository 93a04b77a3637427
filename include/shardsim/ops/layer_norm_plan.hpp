// Sharded plans for LayerNorm when every rank owns whole rows (Replicate, or Shard on any axis
// other than the normalized one). A plan runs the per-rank kernel inside the world's local
// phases and reaches other ranks only through the world's collectives.
//
// The hidden-sharded plans (a rank holds a slice of every row) are in layer_norm_hidden_plan.hpp.
#pragma once

#include <string>
#include <vector>

#include "shardsim/ops/layer_norm.hpp"
#include "shardsim/ops/layer_norm_faults.hpp"
#include "shardsim/world.hpp"

namespace shardsim {

template <typename T>
struct LayerNormShardedSaved {
  DistTensor<T> mean;  // x.global without axis, same placement as x
  DistTensor<T> rstd;
};

// The gradients a sharded LayerNorm backward produces. dweight/dbias are Partial(sum) for the
// row-sharded plan (each rank's tokens contribute) and Shard(axis) for the hidden-sharded ones
// (each rank holds every token of its features). Empty names when there is no weight/bias.
template <typename T>
struct LayerNormShardedGrads {
  DistTensor<T> dx;
  DistTensor<T> dweight;
  DistTensor<T> dbias;
};

// Token-sharded LayerNorm: every rank owns whole rows, so each normalizes its own rows with
// local statistics. No collective. Same arithmetic as the dense oracle, so y, mean and rstd are
// recorded as exact boundaries ("<output>.mean", "<output>.rstd", then "<output>"); they are
// compared with the oracle's `dense_output` (default: output) tensors.
// With faults.combine_token_means the ranks all-reduce the sum of their tokens' means and their
// token count ("<output>.token_mean_sum", "<output>.token_count", no oracle counterpart).
// REQUIRES: x is Replicate or Shard on an axis other than params.axis; weight/bias Replicate.
template <typename T>
DistTensor<T> layer_norm_row_sharded(const World<T>& world, const DistTensor<T>& x,
                                     const DistTensor<T>* weight, const DistTensor<T>* bias,
                                     const LayerNormParams& params, const std::string& output,
                                     LayerNormShardedSaved<T>& saved,
                                     const LayerNormFaults& faults = {},
                                     const std::string& dense_output = "") {
  SHARDSIM_ASSERT(!x.placement.is_partial() &&
                      !(x.placement.is_shard() && x.placement.axis == params.axis),
                  "row-sharded LayerNorm needs whole rows on every rank");
  const std::string dense = dense_output.empty() ? output : dense_output;
  const int ranks = world.size();
  const Shape stats_shape = x.global.without(params.axis);
  DistTensor<T> y = make_dist<T>(output, x.global, x.placement, ranks);
  saved.mean = make_dist<T>(output + ".mean", stats_shape, x.placement, ranks);
  saved.rstd = make_dist<T>(output + ".rstd", stats_shape, x.placement, ranks);
  auto local_forward = [&](int r, const T* combined_mean) {
    LayerNormSaved<T> local;
    const Tensor<T>* w = weight ? &weight->local(r) : nullptr;
    const Tensor<T>* b = bias ? &bias->local(r) : nullptr;
    if (faults.changes_row_kernel()) {
      detail::faulty_layer_norm_forward(x.local(r), w, b, params, faults, combined_mean,
                                        y.local(r), local);
    } else {
      layer_norm_forward(x.local(r), w, b, params, y.local(r), local);
    }
    saved.mean.local(r) = std::move(local.mean);
    saved.rstd.local(r) = std::move(local.rstd);
  };
  if (faults.combine_token_means) {
    // The bug: token statistics are pooled across the sequence-parallel group, as if LayerNorm
    // needed a global reduction. Each rank sums its real tokens' means and counts them.
    const Shape scalar;
    DistTensor<T> mean_sum =
        make_dist<T>(output + ".token_mean_sum", scalar, Placement::partial(), ranks);
    DistTensor<T> token_count =
        make_dist<T>(output + ".token_count", scalar, Placement::partial(), ranks);
    world.for_each_rank([&](int r) {
      LayerNormSaved<T> local;
      Tensor<T> unused;
      layer_norm_forward<T>(x.local(r), nullptr, nullptr, params, unused, local);
      // The rank's real tokens: its slice of the sharded axis (pad rows excluded), or all.
      AxisView view{1, local.mean.numel(), 1};
      std::int64_t valid_extent = view.extent;
      if (x.placement.is_shard()) {
        view = AxisView::of(local.mean.shape(), x.placement.axis);
        valid_extent = rank_slice(x.global, x.placement, ranks, r).valid();
      }
      const std::int64_t rows = view.outer * valid_extent * view.inner;
      T sum = T(0);
      for (std::int64_t o = 0; o < view.outer; ++o) {
        for (std::int64_t i = 0; i < valid_extent; ++i) {
          for (std::int64_t j = 0; j < view.inner; ++j) sum += local.mean[view.flat(o, i, j)];
        }
      }
      mean_sum.local(r)[0] = sum;
      token_count.local(r)[0] = T(rows);
    });
    const DistTensor<T> total = world.all_reduce(
        mean_sum,
        {.op = "all_reduce", .tensor = mean_sum.name, .inputs = {x.name}, .has_oracle = false});
    const DistTensor<T> count = world.all_reduce(
        token_count,
        {.op = "all_reduce", .tensor = token_count.name, .inputs = {x.name}, .has_oracle = false});
    world.for_each_rank([&](int r) {
      const T combined = total.local(r)[0] / count.local(r)[0];
      local_forward(r, &combined);
    });
  } else {
    world.for_each_rank([&](int r) { local_forward(r, nullptr); });
  }
  zero_padding(y);
  zero_padding(saved.mean);
  zero_padding(saved.rstd);
  std::vector<std::string> inputs{x.name};
  if (weight) inputs.push_back(weight->name);
  if (bias) inputs.push_back(bias->name);
  world.compare_boundary({.op = "layer_norm", .tensor = saved.mean.name, .dense = dense + ".mean",
                .exact = true, .inputs = {x.name}},
               saved.mean);
  world.compare_boundary({.op = "layer_norm", .tensor = saved.rstd.name, .dense = dense + ".rstd",
                .exact = true, .inputs = {x.name}},
               saved.rstd);
  world.compare_boundary({.op = "layer_norm", .tensor = output, .dense = dense, .exact = true,
                .inputs = inputs},
               y);
  return y;
}

// Backward of the row-sharded plan: each rank runs the kernel backward on its own rows. dx is the
// dense arithmetic row by row (exact); dweight/dbias are each rank's Partial(sum) share over its
// tokens, to be all-reduced before the optimizer step (the runner does that, as its own
// boundary). Pad rows carry dy = 0 and add exact zeros. Records nothing; the caller does.
template <typename T>
LayerNormShardedGrads<T> layer_norm_row_sharded_backward(
    const World<T>& world, const DistTensor<T>& dy, const DistTensor<T>& x,
    const DistTensor<T>* weight, const DistTensor<T>* bias, const LayerNormShardedSaved<T>& saved,
    const LayerNormParams& params, const std::string& dx_name, const std::string& dweight_name,
    const std::string& dbias_name) {
  const int ranks = world.size();
  const Shape param_shape(std::vector<Axis>{{params.axis, x.global.extent(params.axis)}});
  LayerNormShardedGrads<T> grads;
  // A Replicate x with a Replicate dy (plain tensor parallelism): every rank holds every row and
  // computes the whole parameter gradient, so it is Replicate, not a Partial share. A Partial dy
  // (linear in dy) gives Partial addends of dx.
  const Placement param_grad = x.placement.is_replicate() && dy.placement.is_replicate()
                                   ? Placement::replicate()
                                   : Placement::partial();
  grads.dx = make_dist<T>(dx_name, x.global,
                          dy.placement.is_partial() ? Placement::partial() : x.placement, ranks);
  if (weight) grads.dweight = make_dist<T>(dweight_name, param_shape, param_grad, ranks);
  if (bias) grads.dbias = make_dist<T>(dbias_name, param_shape, param_grad, ranks);
  world.for_each_rank([&](int r) {
    const LayerNormSaved<T> local{saved.mean.local(r), saved.rstd.local(r)};
    layer_norm_backward(dy.local(r), x.local(r), weight ? &weight->local(r) : nullptr, local,
                        params, grads.dx.local(r), weight ? &grads.dweight.local(r) : nullptr,
                        bias ? &grads.dbias.local(r) : nullptr);
  });
  zero_padding(grads.dx);
  return grads;
}

}  // namespace shardsim
