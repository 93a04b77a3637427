// Shape and placement rules of the MLP-block ops (linear, gelu, dropout, add), called from
// infer_step (op_table.cpp).
#include <sstream>

#include "sim/scenario/loader_internal.hpp"

namespace shardsim {

// linear: W is (out, in); the weight's placement decides the form (ops/linear_plan.hpp).
void infer_linear(const StepSpec& step, StepContext& ctx, const TensorState& input) {
  const std::string& x_name = step.str("input");
  const std::string& w_name = step.str("weight");
  const TensorState& weight = ctx.tensor(step, "weight");
  if (weight.shape.rank() != 2) {
    ctx.fail(step, "weight", "'" + w_name + "' " + weight.shape.str() +
                                 " must have two axes [out, in] (y = x W^T)");
  }
  const std::string out = weight.shape[0].name;
  const std::string in = weight.shape[1].name;
  if (!input.shape.has(in)) {
    ctx.fail(step, "weight", "'" + w_name + "' " + weight.shape.str() + " is [out, in] = [" + out +
                                 ", " + in + "] but '" + x_name + "' " + input.shape.str() +
                                 " has no axis '" + in + "' (the convention is W (out, in))");
  }
  if (input.shape.has(out)) {
    ctx.fail(step, "weight", "'" + w_name + "' " + weight.shape.str() + " produces axis '" + out +
                                 "', which '" + x_name + "' " + input.shape.str() +
                                 " already has; name the output features differently");
  }
  if (input.shape.extent(in) != weight.shape.extent(in)) {
    ctx.fail(step, "weight", "shape mismatch: '" + w_name + "' " + weight.shape.str() +
                                 " contracts " + in + "=" + std::to_string(weight.shape.extent(in)) +
                                 " but '" + x_name + "' is " + input.shape.str());
  }
  std::string form = "none";
  Placement bias_placement = Placement::replicate();
  Placement output_placement = input.placement;
  const Placement& wp = weight.placement;
  if (wp.is_partial()) {
    ctx.fail(step, "weight", "'" + w_name + "' must be Replicate, Shard(" + out + ") or Shard(" +
                                 in + "), not Partial(sum)");
  } else if (wp.is_shard() && wp.axis == out) {
    form = "column";
    bias_placement = wp;
    output_placement = Placement::shard(out, wp.split);
    if (!input.placement.is_replicate()) {
      ctx.fail(step, "input", "column-parallel linear ('" + w_name + "' is " + wp.str() +
                                  ") needs its input '" + x_name +
                                  "' Replicate over the group, but it is " +
                                  input.placement.str() +
                                  "; all-gather it first (a redistribute to \"Replicate\")");
    }
  } else if (wp.is_shard() && wp.axis == in) {
    form = "row";
    output_placement = Placement::partial();
    if (!(input.placement == wp)) {
      ctx.fail(step, "input", "row-parallel linear ('" + w_name + "' is " + wp.str() +
                                  ") needs its input '" + x_name + "' " + wp.str() +
                                  ", but it is " + input.placement.str());
    }
  } else if (wp.is_shard()) {
    ctx.fail(step, "weight", "'" + w_name + "' " + weight.shape.str() + " is " + wp.str() +
                                 "; a weight is sharded on its out axis '" + out +
                                 "' (column-parallel) or its in axis '" + in + "' (row-parallel)");
  } else if (input.placement.is_partial() ||
             (input.placement.is_shard() && input.placement.axis == in)) {
    ctx.fail(step, "input", "'" + x_name + "' is " + input.placement.str() + " but '" + w_name +
                                "' is Replicate: a Replicate weight needs whole input rows "
                                "(shard the weight on '" + in + "' for a row-parallel layer)");
  }
  if (step.has("parallel") && step.str("parallel") != form) {
    ctx.fail(step, "parallel", "parallel = \"" + step.str("parallel") + "\" but '" + w_name +
                                   "' is " + wp.str() + ", which makes the layer " + form +
                                   "-parallel" + (form == "none" ? " (not parallel)" : ""));
  }
  if (step.has("bias")) {
    const TensorState& bias = ctx.tensor(step, "bias");
    const Shape bias_shape(std::vector<Axis>{{out, weight.shape.extent(out)}});
    if (!(bias.shape == bias_shape)) {
      ctx.fail(step, "bias", "shape mismatch: '" + step.str("bias") + "' is " + bias.shape.str() +
                                 " but '" + w_name + "' " + weight.shape.str() + " needs " +
                                 bias_shape.str());
    }
    if (!(bias.placement == bias_placement)) {
      ctx.fail(step, "bias", "'" + step.str("bias") + "' must be " + bias_placement.str() +
                                 " for a " + form + "-parallel layer, not " +
                                 bias.placement.str());
    }
  }
  std::vector<Axis> axes = input.shape.axes();
  axes[input.shape.position(in)] = {out, weight.shape.extent(out)};
  ctx.define(step, "output", {Shape(std::move(axes)), output_placement});
}

// gelu, dropout, add: elementwise, the output keeps the input's shape and placement.
void infer_elementwise(const StepSpec& step, StepContext& ctx, const TensorState& input) {
  if (step.op != "add" && input.placement.is_partial()) {
    ctx.fail(step, "input", step.op + " needs a Shard or Replicate input, not Partial(sum): " +
                                "reduce it first (a redistribute)");
  }
  if (step.op == "dropout") {
    const double p = step.num_or("p", 0.0);
    if (!(p >= 0 && p < 1)) {
      std::ostringstream got;
      got << p;
      ctx.fail(step, "p", "p must be in [0, 1), got " + got.str());
    }
    if (step.int_or("seed", 0) < 0) ctx.fail(step, "seed", "seed must be >= 0");
    const std::int64_t stream = step.int_or("stream", 0);
    if (stream < 0 || stream > 0xffffffffLL) {
      ctx.fail(step, "stream", "stream must be in [0, 2^32), got " + std::to_string(stream));
    }
  }
  if (step.op == "add") {
    const TensorState& residual = ctx.tensor(step, "residual");
    if (!(residual.shape == input.shape)) {
      ctx.fail(step, "residual", "shape mismatch: '" + step.str("residual") + "' is " +
                                     residual.shape.str() + " but '" + step.str("input") +
                                     "' is " + input.shape.str());
    }
    if (!(residual.placement == input.placement)) {
      ctx.fail(step, "residual", "placement mismatch: '" + step.str("residual") + "' is " +
                                     residual.placement.str() + " but '" + step.str("input") +
                                     "' is " + input.placement.str());
    }
  }
  ctx.define(step, "output", {input.shape, input.placement});
}

}  // namespace shardsim
