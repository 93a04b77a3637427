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
//
// On an N-D mesh the form is the weight's placement on the world's dim (tp). On every other dim
// the weight is Replicate and x holds whole `in` rows (Shard of another axis, or Replicate): y,
// dy and dx keep x's placement there, and dW, db are Partial on a dim where the rows are
// sharded (each member sums over its own rows), Replicate where they are not.
#pragma once

#include <string>
#include <string_view>

#include "core/world.hpp"
#include "ops/add/add_plan.hpp"
#include "ops/linear/linear.hpp"
#include "ops/op_list.hpp"

namespace shardsim {

enum class LinearParallel { none, column, row };

inline std::string_view linear_parallel_name(LinearParallel form) {
  switch (form) {
    case LinearParallel::none:
      return "none";
    case LinearParallel::column:
      return "column";
    case LinearParallel::row:
      return "row";
  }
  return "?";
}

// The form the weight's placement implies (see the header comment).
inline LinearParallel linear_parallel_of(const Placement& weight, const LinearParams& params) {
  if (weight.is_shard() && weight.axis == params.out_axis) return LinearParallel::column;
  if (weight.is_shard() && weight.axis == params.in_axis) return LinearParallel::row;
  return LinearParallel::none;
}

// The seeded faults of the sharded plans (fault_list.hpp); all off is the correct program.
struct LinearFaults {
  bool row_bias_every_rank = false;        // every row-parallel member adds the bias
  bool column_backward_unreduced = false;  // column-parallel grad(x) left Partial, taken as whole
};

// REQUIRES: the placements of the form (the scenario loader checks them).
template <typename T>
DistTensor<T> linear_sharded(const World<T>& world, const DistTensor<T>& x,
                             const DistTensor<T>& weight, const DistTensor<T>* bias,
                             const LinearParams& params, const std::string& output,
                             const LinearFaults& faults = {}) {
  const Placement& w_on = world.placement(weight);
  const Placement& x_on = world.placement(x);
  const LinearParallel form = linear_parallel_of(w_on, params);
  const Shape y_shape = linear_output_shape(x.global, params.in_axis, params.out_axis,
                                            weight.global.extent(params.out_axis));
  Placement y_placement = x_on;
  if (form == LinearParallel::column) {
    SHARDSIM_ASSERT(x_on.is_replicate(), "column-parallel linear needs a Replicate input");
    y_placement = Placement::shard(params.out_axis, w_on.split);
  } else if (form == LinearParallel::row) {
    SHARDSIM_ASSERT(x_on == w_on, "row-parallel linear: x and W must be Shard(in)");
    y_placement = Placement::partial();
  } else {
    SHARDSIM_ASSERT(!x_on.is_partial() && !(x_on.is_shard() && x_on.axis == params.in_axis),
                    "linear with a Replicate weight needs whole input rows");
  }
  DistTensor<T> y = world.make(output, y_shape, x.layout.with(world.dim(), y_placement));
  world.for_each_rank([&](int r) {
    const Tensor<T>* b = bias ? &bias->local(r) : nullptr;
    // Added once, by coordinate 0 (the fault: by every member).
    if (form == LinearParallel::row && world.coord(r) != 0 && !faults.row_bias_every_rank) {
      b = nullptr;
    }
    linear_forward(x.local(r), weight.local(r), b, params, y.local(r));
  });
  zero_padding(y);
  std::vector<std::string> inputs{x.name, weight.name};
  if (bias) inputs.push_back(bias->name);
  world.compare_boundary({.op = op_label(OpKind::linear),
                          .tensor = output,
                          .exact = form != LinearParallel::row,
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
                                              const std::string& dbias_name,
                                              const LinearFaults& faults = {}) {
  const int dim = world.dim();
  const Placement& w_on = world.placement(weight);
  const LinearParallel form = linear_parallel_of(w_on, params);
  // dy where the form needs it on the world's dim; elementwise with x on the others.
  Layout dy_target = elementwise_grad_target(x.layout, dy_held.layout);
  if (form == LinearParallel::column) {
    dy_target = dy_target.with(dim, Placement::shard(params.out_axis, w_on.split));
  } else if (form == LinearParallel::row) {
    dy_target = dy_target.with(dim, Placement::replicate());
  }
  const DistTensor<T> dy = align_grad(world, dy_held, dy_target);

  LinearShardedGrads<T> grads;
  grads.dy_name = dy.name;
  // Every dim as the `none` form: dx with dy's rows, dW and db summed over the rows a member
  // holds (Partial unless x and dy are whole there). Then the form's own dim.
  Layout dx_layout = dy.layout;
  Layout param_grad = weight.layout;
  for (int d = 0; d < x.layout.ndim(); ++d) {
    const bool whole_rows = x.layout.on(d).is_replicate() && dy.layout.on(d).is_replicate();
    param_grad.dims[d] = whole_rows ? Placement::replicate() : Placement::partial();
  }
  Layout bias_grad = param_grad;
  if (form == LinearParallel::column) {
    // Partial: each member's share of dx = dy W over its output features (the fault takes the
    // share for the whole gradient, x's placement).
    dx_layout = dx_layout.with(
        dim, faults.column_backward_unreduced ? world.placement(x) : Placement::partial());
    param_grad = param_grad.with(dim, w_on);
    bias_grad = bias_grad.with(dim, w_on);
  } else if (form == LinearParallel::row) {
    dx_layout = dx_layout.with(dim, world.placement(x));
    param_grad = param_grad.with(dim, w_on);
    bias_grad = bias_grad.with(dim, Placement::partial());
  }
  grads.dx = world.make(dx_name, x.global, dx_layout);
  grads.dweight = world.make(dweight_name, weight.global, param_grad);
  if (bias) grads.dbias = world.make(dbias_name, bias->global, bias_grad);
  world.for_each_rank([&](int r) {
    Tensor<T>* db = bias ? &grads.dbias.local(r) : nullptr;
    if (form == LinearParallel::row && world.coord(r) != 0) db = nullptr;  // coordinate 0 added b
    linear_backward(dy.local(r), x.local(r), weight.local(r), params, grads.dx.local(r),
                    &grads.dweight.local(r), db);
  });
  zero_padding(grads.dx);
  zero_padding(grads.dweight);
  if (bias) zero_padding(grads.dbias);
  grads.dx_exact = !dx_layout.has_partial();
  grads.dweight_exact = !param_grad.has_partial();
  grads.dbias_exact = !bias_grad.has_partial();
  return grads;
}

}  // namespace shardsim
