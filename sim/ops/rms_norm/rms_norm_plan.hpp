// Sharded plans for RMSNorm (ops/rms_norm.hpp). Same placements as LayerNorm's plans:
//
//   row-sharded     x Replicate or Shard(other axis), weight Replicate: each rank normalizes its
//                   own rows with the kernel, no collective; "<out>.rrms" and "<out>" are the
//                   dense arithmetic and claim exactness. Backward: dx exact per row, dweight a
//                   Partial(sum) share per rank (the runner all-reduces it); with x and dy
//                   Replicate every rank computes the whole dweight (Replicate).
//   hidden-sharded  x Shard(axis), weight Shard(axis) with the same split: each rank sums x^2
//                   over its slice, the partial sums are all-reduced ("<out>.sumsq"),
//                   rrms = 1 / sqrt(SS / H + eps). A sum of non-negative terms has no
//                   cancellation, so one statistic suffices (no welford/redistribute modes).
//                   Backward all-reduces the one row reduction sum(dnorm * norm)
//                   ("grad(<out>).sum_dnorm_norm"); dweight is Shard(axis), local.
#pragma once

#include <string>
#include <vector>

#include "core/world.hpp"
#include "ops/add/add_plan.hpp"
#include "ops/op_list.hpp"
#include "ops/rms_norm/rms_norm.hpp"

namespace shardsim {

template <typename T>
struct RmsNormShardedSaved {
  DistTensor<T> rrms;  // (rows): x's placement (row-sharded) or Replicate (hidden-sharded)
};

template <typename T>
struct RmsNormShardedGrads {
  DistTensor<T> dx;       // x.global
  DistTensor<T> dweight;  // (H): Partial (row-sharded) or Shard(axis) (hidden-sharded); or empty
};

// In place when `x_values` holds x's rank tensors, moved out by a caller that does not read x
// again (layer_norm_row_sharded).
// REQUIRES: x Replicate or Shard(other axis); weight Replicate or null.
template <typename T>
DistTensor<T> rms_norm_row_sharded(const World<T>& world, const DistTensor<T>& x,
                                   const DistTensor<T>* weight, const RmsNormParams& params,
                                   const std::string& output, RmsNormShardedSaved<T>& saved,
                                   std::vector<Tensor<T>> x_values = {}) {
  SHARDSIM_ASSERT(!x.layout.has_partial() && !x.layout.shards(params.axis),
                  "row-sharded RMSNorm needs whole rows on every rank");
  const bool in_place = !x_values.empty();
  DistTensor<T> y = make_output_like(output, x, std::move(x_values));  // x's placement
  const DistTensor<T>& source = in_place ? y : x;  // x's values, until y's overwrite them
  // (rows), x's placement.
  saved.rrms =
      world.make(part_name(output, rms_norm_parts::rrms), x.global.without(params.axis), x.layout);
  world.for_each_rank([&](int r) {
    RmsNormSaved<T> local;
    rms_norm_forward(source.local(r), weight ? &weight->local(r) : nullptr, params, y.local(r),
                     local);
    saved.rrms.local(r) = std::move(local.rrms);
  });
  zero_padding(y);
  zero_padding(saved.rrms);
  std::vector<std::string> inputs{x.name};
  if (weight) inputs.push_back(weight->name);
  world.compare_boundary({.op = op_label(OpKind::rms_norm),
                          .tensor = saved.rrms.name,
                          .exact = true,
                          .inputs = {x.name}},
                         saved.rrms);
  world.compare_boundary(
      {.op = op_label(OpKind::rms_norm), .tensor = output, .exact = true, .inputs = inputs}, y);
  return y;
}

template <typename T>
RmsNormShardedGrads<T> rms_norm_row_sharded_backward(
    const World<T>& world, const DistTensor<T>& dy, const DistTensor<T>& x,
    const DistTensor<T>* weight, const RmsNormShardedSaved<T>& saved, const RmsNormParams& params,
    const std::string& dx_name, const std::string& dweight_name) {
  RmsNormShardedGrads<T> grads;
  // A Replicate x with a Replicate dy: every rank holds every row and computes the whole
  // parameter gradient, a Replicate, not a Partial share. A Partial dy (the backward is linear in
  // dy) gives Partial addends of dx.
  const Layout param_grad = row_sum_grad_layout(x.layout, dy.layout);
  grads.dx = world.make(dx_name, x.global, row_dx_layout(x.layout, dy.layout));
  if (weight) grads.dweight = world.make(dweight_name, weight->global, param_grad);
  world.for_each_rank([&](int r) {
    const RmsNormSaved<T> local{saved.rrms.local(r)};
    rms_norm_backward(dy.local(r), x.local(r), weight ? &weight->local(r) : nullptr, local, params,
                      grads.dx.local(r), weight ? &grads.dweight.local(r) : nullptr);
  });
  zero_padding(grads.dx);
  return grads;
}

// REQUIRES: x Shard(params.axis); weight Shard(params.axis) with x's split, or null.
template <typename T>
DistTensor<T> rms_norm_hidden_sharded(const World<T>& world, const DistTensor<T>& x,
                                      const DistTensor<T>* weight, const RmsNormParams& params,
                                      const std::string& output, RmsNormShardedSaved<T>& saved) {
  SHARDSIM_ASSERT(world.placement(x).is_shard() && world.placement(x).axis == params.axis,
                  "hidden-sharded RMSNorm needs x sharded on the normalized axis");
  const std::int64_t count = x.global.extent(params.axis);
  const Shape stats_shape = x.global.without(params.axis);
  // (rows), Partial: each rank's sum of squares over its slice of every row.
  DistTensor<T> sums_sq = world.make(part_name(output, rms_norm_parts::sum_sq), stats_shape,
                                     x.layout.with(world.dim(), Placement::partial()));
  world.for_each_rank([&](int r) {
    rms_norm_partial_sum_sq(x.local(r), params, x.slice(r, params.axis).valid(), sums_sq.local(r));
  });
  // (rows), Replicate.
  const DistTensor<T> total =
      world.all_reduce(sums_sq, {.op = "all_reduce", .tensor = sums_sq.name, .inputs = {x.name}});
  saved.rrms = world.make(part_name(output, rms_norm_parts::rrms), stats_shape,
                          x.layout.with(world.dim(), Placement::replicate()));
  DistTensor<T> y = world.make(output, x.global, x.layout);  // x's placement
  world.for_each_rank([&](int r) {
    const T row_length = T(count);
    const T eps = T(params.eps);
    // This rank's rows (another mesh dim may shard them).
    for (std::int64_t row = 0; row < total.local(r).numel(); ++row) {
      saved.rrms.local(r)[row] = rms_norm_rrms(total.local(r)[row], row_length, eps);
    }
    rms_norm_apply(x.local(r), weight ? &weight->local(r) : nullptr,
                   RmsNormSaved<T>{saved.rrms.local(r)}, params, x.slice(r, params.axis).valid(),
                   y.local(r));
  });
  zero_padding(y);
  std::vector<std::string> inputs{x.name};
  if (weight) inputs.push_back(weight->name);
  world.compare_boundary(
      {.op = op_label(OpKind::rms_norm), .tensor = saved.rrms.name, .inputs = {x.name}},
      saved.rrms);
  world.compare_boundary({.op = op_label(OpKind::rms_norm), .tensor = output, .inputs = inputs}, y);
  return y;
}

template <typename T>
RmsNormShardedGrads<T> rms_norm_hidden_sharded_backward(
    const World<T>& world, const DistTensor<T>& dy, const DistTensor<T>& x,
    const DistTensor<T>* weight, const RmsNormShardedSaved<T>& saved, const RmsNormParams& params,
    const std::string& dx_name, const std::string& dweight_name) {
  const std::int64_t count = x.global.extent(params.axis);
  RmsNormShardedGrads<T> grads;
  grads.dx = world.make(dx_name, x.global, x.layout);
  if (weight)
    grads.dweight = world.make(
        dweight_name, weight->global,
        row_sum_grad_layout(x.layout, dy.layout).with(world.dim(), world.placement(*weight)));
  // (rows), Partial: each rank's sum(dnorm * norm) over its slice of every row.
  DistTensor<T> partial =
      world.make(part_name(dy.name, rms_norm_parts::sum_dnorm_norm), x.global.without(params.axis),
                 x.layout.with(world.dim(), Placement::partial()));
  world.for_each_rank([&](int r) {
    rms_norm_backward_sum(dy.local(r), x.local(r), weight ? &weight->local(r) : nullptr,
                          RmsNormSaved<T>{saved.rrms.local(r)}, params,
                          x.slice(r, params.axis).valid(), partial.local(r));
  });
  std::vector<std::string> inputs{x.name, dy.name};
  if (weight) inputs.push_back(weight->name);
  // (rows), Replicate.
  const DistTensor<T> total =
      world.all_reduce(partial, {.op = "all_reduce", .tensor = partial.name, .inputs = inputs});
  world.for_each_rank([&](int r) {
    rms_norm_backward_apply(dy.local(r), x.local(r), weight ? &weight->local(r) : nullptr,
                            RmsNormSaved<T>{saved.rrms.local(r)}, total.local(r), count, params,
                            x.slice(r, params.axis).valid(), grads.dx.local(r),
                            weight ? &grads.dweight.local(r) : nullptr);
  });
  zero_padding(grads.dx);
  return grads;
}

}  // namespace shardsim
