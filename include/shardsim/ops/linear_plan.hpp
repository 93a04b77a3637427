// Sharded plans for the linear layer y = x W^T (+ b), W (out, in) (ops/linear.hpp), in the three
// forms Megatron-LM uses. The weight's placement decides the form:
//
//   none    W Replicate. x Replicate or Shard on any axis but `in`; y has x's placement. Each
//           rank runs the dense kernel on its rows: exact.
//   column  W Shard(out). x must be Replicate over the group (the all-gathered activation);
//           b, if any, Shard(out) with W's split. y is Shard(out) with W's split. Each rank
//           computes whole output features with the dense dot product in the dense order: exact.
//   row     W Shard(in). x Shard(in) with W's split; b, if any, Replicate and added by rank 0
//           only. y is Partial(sum): each rank's addend contracts its slice of `in`, so the sum
//           over ranks is a reordered dot product, not exact.
//
// Backward (dy -> dx, dW, db). dy is first moved where the form needs it, through collectives
// that are recorded as "grad(y)@PLACEMENT": column Shard(out); row Replicate (the full gradient
// of a Partial output); none: x's Shard placement, else Replicate or Partial as held.
//   column  dx Partial (each rank contracts its output features); dW, db Shard(out), exact.
//   row     dx Shard(in), exact; dW Shard(in), exact; db Partial (rank 0 holds it), because
//           rank 0 alone added b.
//   none    dx with dy's placement (exact unless Partial); dW, db Replicate and exact when x and
//           dy are both Replicate, else Partial (each rank sums over its own rows).
// A sharded weight's gradient keeps the weight's placement, so SGD steps each shard locally; a
// Partial gradient of a Replicate parameter is all-reduced by the runner before SGD.
#pragma once

#include <string>
#include <string_view>

#include "shardsim/ops/add_plan.hpp"
#include "shardsim/ops/linear.hpp"
#include "shardsim/world.hpp"

namespace shardsim {

enum class LinearParallel { none, column, row };

inline std::string_view linear_parallel_name(LinearParallel form) {
  switch (form) {
    case LinearParallel::none: return "none";
    case LinearParallel::column: return "column";
    case LinearParallel::row: return "row";
  }
  return "?";
}

// The form the weight's placement implies (see the header comment).
inline LinearParallel linear_parallel_of(const Placement& weight, const LinearParams& params) {
  if (weight.is_shard() && weight.axis == params.out_axis) return LinearParallel::column;
  if (weight.is_shard() && weight.axis == params.in_axis) return LinearParallel::row;
  return LinearParallel::none;
}

// REQUIRES: the placements of the form (the scenario loader checks them).
template <typename T>
DistTensor<T> linear_sharded(const World<T>& world, const DistTensor<T>& x,
                             const DistTensor<T>& weight, const DistTensor<T>* bias,
                             const LinearParams& params, const std::string& output) {
  const LinearParallel form = linear_parallel_of(weight.placement, params);
  const int ranks = world.size();
  const Shape y_shape = linear_output_shape(x.global, params.in_axis, params.out_axis,
                                            weight.global.extent(params.out_axis));
  Placement y_placement = x.placement;
  if (form == LinearParallel::column) {
    SHARDSIM_ASSERT(x.placement.is_replicate(), "column-parallel linear needs a Replicate input");
    y_placement = Placement::shard(params.out_axis, weight.placement.split);
  } else if (form == LinearParallel::row) {
    SHARDSIM_ASSERT(x.placement == weight.placement, "row-parallel linear: x and W must be Shard(in)");
    y_placement = Placement::partial();
  } else {
    SHARDSIM_ASSERT(!x.placement.is_partial() && !(x.placement.is_shard() &&
                                                   x.placement.axis == params.in_axis),
                    "linear with a Replicate weight needs whole input rows");
  }
  DistTensor<T> y = make_dist<T>(output, y_shape, y_placement, ranks);
  world.for_each_rank([&](int r) {
    const Tensor<T>* b = bias ? &bias->local(r) : nullptr;
    if (form == LinearParallel::row && r != 0) b = nullptr;  // the bias is added once
    linear_forward(x.local(r), weight.local(r), b, params, y.local(r));
  });
  zero_padding(y);
  std::vector<std::string> inputs{x.name, weight.name};
  if (bias) inputs.push_back(bias->name);
  world.compare_boundary({.op = "linear", .tensor = output, .exact = form != LinearParallel::row,
                .inputs = inputs},
               y);
  return y;
}

template <typename T>
struct LinearShardedGrads {
  DistTensor<T> dx;
  DistTensor<T> dweight;
  DistTensor<T> dbias;  // empty without a bias
  bool dx_exact = false;
  bool dweight_exact = false;
  bool dbias_exact = false;
  std::string dy_name;  // the gradient actually used: grad(y) or grad(y)@PLACEMENT
};

// Gradient names are grad(x), grad(W), grad(b) (the caller's `names`).
template <typename T>
LinearShardedGrads<T> linear_backward_sharded(const World<T>& world, const DistTensor<T>& dy_held,
                                              const DistTensor<T>& x, const DistTensor<T>& weight,
                                              const DistTensor<T>* bias, const LinearParams& params,
                                              const std::string& dx_name,
                                              const std::string& dweight_name,
                                              const std::string& dbias_name) {
  const LinearParallel form = linear_parallel_of(weight.placement, params);
  const int ranks = world.size();
  Placement dy_target;
  if (form == LinearParallel::column) {
    dy_target = Placement::shard(params.out_axis, weight.placement.split);
  } else if (form == LinearParallel::row) {
    dy_target = Placement::replicate();
  } else {
    dy_target = elementwise_grad_target(x.placement, dy_held.placement);
  }
  const DistTensor<T> dy = align_grad(world, dy_held, dy_target);

  LinearShardedGrads<T> grads;
  grads.dy_name = dy.name;
  Placement dx_placement = dy.placement;
  Placement param_grad = (x.placement.is_replicate() && dy.placement.is_replicate())
                             ? Placement::replicate()
                             : Placement::partial();
  Placement bias_grad = param_grad;
  if (form == LinearParallel::column) {
    dx_placement = Placement::partial();
    param_grad = weight.placement;
    bias_grad = weight.placement;
  } else if (form == LinearParallel::row) {
    dx_placement = x.placement;
    param_grad = weight.placement;
    bias_grad = Placement::partial();
  }
  grads.dx = make_dist<T>(dx_name, x.global, dx_placement, ranks);
  grads.dweight = make_dist<T>(dweight_name, weight.global, param_grad, ranks);
  if (bias) grads.dbias = make_dist<T>(dbias_name, bias->global, bias_grad, ranks);
  world.for_each_rank([&](int r) {
    Tensor<T>* db = bias ? &grads.dbias.local(r) : nullptr;
    if (form == LinearParallel::row && r != 0) db = nullptr;  // only rank 0 added the bias
    linear_backward(dy.local(r), x.local(r), weight.local(r), params, grads.dx.local(r),
                    &grads.dweight.local(r), db);
  });
  zero_padding(grads.dx);
  zero_padding(grads.dweight);
  if (bias) zero_padding(grads.dbias);
  grads.dx_exact = !dx_placement.is_partial();
  grads.dweight_exact = !param_grad.is_partial();
  grads.dbias_exact = !bias_grad.is_partial();
  return grads;
}

}  // namespace shardsim
