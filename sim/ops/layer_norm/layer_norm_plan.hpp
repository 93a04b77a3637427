// Sharded plans for LayerNorm when every rank owns whole rows (Replicate, or Shard on any axis
// other than the normalized one). A plan runs the per-rank kernel inside the world's local
// phases and reaches other ranks only through the world's collectives.
//
// The hidden-sharded plans (a rank holds a slice of every row) are in layer_norm_hidden_plan.hpp.
#pragma once

#include <string>
#include <vector>

#include "core/world.hpp"
#include "ops/add/add_plan.hpp"
#include "ops/layer_norm/layer_norm.hpp"
#include "ops/layer_norm/layer_norm_faults.hpp"
#include "ops/op_list.hpp"

namespace shardsim {

template <typename T>
struct LayerNormShardedSaved {
  DistTensor<T> mean;  // (rows): x.global without axis, the placement the plan states
  DistTensor<T> rstd;  // (rows)
};

// The gradients a sharded LayerNorm backward produces. dweight/dbias are Partial(sum) for the
// row-sharded plan (each rank's tokens contribute) and Shard(axis) for the hidden-sharded ones
// (each rank holds every token of its features). Empty names when there is no weight/bias.
template <typename T>
struct LayerNormShardedGrads {
  DistTensor<T> dx;       // x.global
  DistTensor<T> dweight;  // (H)
  DistTensor<T> dbias;    // (H)
};

namespace detail {

// The names of x and of the parameters present, in that order: a boundary's inputs.
template <typename T>
std::vector<std::string> layer_norm_input_names(const DistTensor<T>& x, const DistTensor<T>* weight,
                                                const DistTensor<T>* bias) {
  std::vector<std::string> names{x.name};
  if (weight) names.push_back(weight->name);
  if (bias) names.push_back(bias->name);
  return names;
}

// The combine_token_means fault's shared mean, as every rank receives it: each rank sums the
// means of its real tokens (pad rows excluded) in ascending row order, the sums and the token
// counts are all-reduced ("<output>.token_mean_sum", "<output>.token_count", no oracle), and the
// mean is their quotient. The bug: token statistics pooled across the sequence-parallel group,
// as if LayerNorm needed a global reduction. Returns a Replicate scalar.
template <typename T>
DistTensor<T> combined_token_mean(const World<T>& world, const DistTensor<T>& x,
                                  const LayerNormParams& params, const std::string& output) {
  const Shape scalar;
  // Partial over the world's group; a scalar is Replicate on the other dims.
  const Layout group_partial = Layout::uniform(x.layout.ndim(), Placement::replicate())
                                   .with(world.dim(), Placement::partial());
  // scalar, Partial: each rank's sum of its token means and its token count.
  DistTensor<T> mean_sum = world.make(part_name(output, layer_norm_parts::token_mean_sum), scalar,
                                      x.layout.with(world.dim(), Placement::partial()));
  DistTensor<T> token_count = world.make(part_name(output, layer_norm_parts::token_count), scalar,
                                         x.layout.with(world.dim(), Placement::partial()));
  world.for_each_rank([&](int r) {
    LayerNormSaved<T> local;  // (local rows)
    layer_norm_stats(x.local(r), params, LayerNormFaults{}, local);
    // The rank's tokens along the sharded axis of its (local rows); all of them when Replicate.
    AxisView tokens{1, local.mean.numel(), 1};
    std::int64_t real_tokens = tokens.extent;
    if (world.placement(x).is_shard()) {
      const std::string& axis = world.placement(x).axis;
      tokens = AxisView::of(local.mean.shape(), axis);
      real_tokens = x.slice(r, axis).valid();
    }
    T sum = T(0);
    for (std::int64_t outer = 0; outer < tokens.outer; ++outer) {
      for (std::int64_t token = 0; token < real_tokens; ++token) {
        for (std::int64_t inner = 0; inner < tokens.inner; ++inner) {
          sum += local.mean[tokens.flat(outer, token, inner)];
        }
      }
    }
    mean_sum.local(r)[0] = sum;
    token_count.local(r)[0] = T(tokens.outer * real_tokens * tokens.inner);
  });
  // scalar, Replicate: the all-reduced sum, which becomes the mean in place below (and is not
  // recorded again).
  DistTensor<T> shared_mean = world.all_reduce(
      mean_sum,
      {.op = "all_reduce", .tensor = mean_sum.name, .inputs = {x.name}, .has_oracle = false});
  // scalar, Replicate.
  const DistTensor<T> count = world.all_reduce(
      token_count,
      {.op = "all_reduce", .tensor = token_count.name, .inputs = {x.name}, .has_oracle = false});
  world.for_each_rank(
      [&](int r) { shared_mean.local(r)[0] = shared_mean.local(r)[0] / count.local(r)[0]; });
  return shared_mean;
}

}  // namespace detail

// Token-sharded LayerNorm: every rank owns whole rows, so each runs the row kernel
// (layer_norm_forward with `faults` as its policy) on its own rows. No collective. With no
// fault it is the dense oracle's arithmetic, so y, mean and rstd are recorded as exact
// boundaries ("<output>.mean", "<output>.rstd", then "<output>"); they are compared with the
// oracle's `dense_output` (default: output) tensors.
// With faults.combine_token_means the ranks first all-reduce their token means
// (detail::combined_token_mean) and every row is centred on the result.
// In place: `x_values` non-empty holds x's rank tensors, moved out of x by a caller that does not
// read x again (x keeps its name, shape and layout); each rank then normalizes its rows in them
// and they become y's, so that x and y are never both held. The same arithmetic either way.
// REQUIRES: x is Replicate or Shard on an axis other than params.axis; weight/bias Replicate.
template <typename T>
DistTensor<T> layer_norm_row_sharded(const World<T>& world, const DistTensor<T>& x,
                                     const DistTensor<T>* weight, const DistTensor<T>* bias,
                                     const LayerNormParams& params, const std::string& output,
                                     LayerNormShardedSaved<T>& saved,
                                     const LayerNormFaults& faults = {},
                                     const std::string& dense_output = "",
                                     std::vector<Tensor<T>> x_values = {}) {
  SHARDSIM_ASSERT(!x.layout.has_partial() && !x.layout.shards(params.axis),
                  "row-sharded LayerNorm needs whole rows on every rank");
  const std::string dense = dense_output.empty() ? output : dense_output;
  const Shape stats_shape = x.global.without(params.axis);  // (rows)
  const bool in_place = !x_values.empty();
  DistTensor<T> y = make_output_like(output, x, std::move(x_values));  // x's placement
  const DistTensor<T>& source = in_place ? y : x;  // x's values, until y's overwrite them
  // (rows), x's placement.
  saved.mean = world.make(part_name(output, layer_norm_parts::mean), stats_shape, x.layout);
  saved.rstd = world.make(part_name(output, layer_norm_parts::rstd), stats_shape, x.layout);
  DistTensor<T> shared_mean;  // scalar, Replicate: combine_token_means only
  if (faults.combine_token_means)
    shared_mean = detail::combined_token_mean(world, source, params, output);
  world.for_each_rank([&](int r) {
    LayerNormSaved<T> local;  // (local rows)
    layer_norm_forward(source.local(r), weight ? &weight->local(r) : nullptr,
                       bias ? &bias->local(r) : nullptr, params, faults, y.local(r), local,
                       faults.combine_token_means ? &shared_mean.local(r)[0] : nullptr);
    saved.mean.local(r) = std::move(local.mean);
    saved.rstd.local(r) = std::move(local.rstd);
  });
  zero_padding(y);
  zero_padding(saved.mean);
  zero_padding(saved.rstd);
  world.compare_boundary({.op = op_label(OpKind::layer_norm),
                          .tensor = saved.mean.name,
                          .dense = part_name(dense, layer_norm_parts::mean),
                          .exact = true,
                          .inputs = {x.name}},
                         saved.mean);
  world.compare_boundary({.op = op_label(OpKind::layer_norm),
                          .tensor = saved.rstd.name,
                          .dense = part_name(dense, layer_norm_parts::rstd),
                          .exact = true,
                          .inputs = {x.name}},
                         saved.rstd);
  world.compare_boundary({.op = op_label(OpKind::layer_norm),
                          .tensor = output,
                          .dense = dense,
                          .exact = true,
                          .inputs = detail::layer_norm_input_names(x, weight, bias),
                          .stored = params.store.has_value()},
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
  const Shape param_shape(std::vector<Axis>{{params.axis, x.global.extent(params.axis)}});  // (H)
  LayerNormShardedGrads<T> grads;
  // A Replicate x with a Replicate dy (plain tensor parallelism): every rank holds every row and
  // computes the whole parameter gradient, so it is Replicate, not a Partial share. A Partial dy
  // (linear in dy) gives Partial addends of dx.
  const Layout param_grad = row_sum_grad_layout(x.layout, dy.layout);
  grads.dx = world.make(dx_name, x.global, row_dx_layout(x.layout, dy.layout));
  if (weight) grads.dweight = world.make(dweight_name, param_shape, param_grad);
  if (bias) grads.dbias = world.make(dbias_name, param_shape, param_grad);
  world.for_each_rank([&](int r) {
    const LayerNormSaved<T> local{saved.mean.local(r), saved.rstd.local(r)};  // (local rows)
    layer_norm_backward(dy.local(r), x.local(r), weight ? &weight->local(r) : nullptr, local,
                        params, grads.dx.local(r), weight ? &grads.dweight.local(r) : nullptr,
                        bias ? &grads.dbias.local(r) : nullptr);
  });
  zero_padding(grads.dx);
  return grads;
}

}  // namespace shardsim
