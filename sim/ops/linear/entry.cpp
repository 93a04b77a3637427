// linear: schema and shape/placement rules.
#include "scenario/op_entry.hpp"

namespace shardsim {

namespace {

// A linear's bias: shape [out], held like the output features of the layer's `form`.
void linear_bias_rules(const StepSpec& step, StepContext& ctx, const TensorState& weight,
                       const std::string& out, const std::string& form,
                       const Placement& bias_placement) {
  const TensorState& bias = ctx.tensor(step, "bias");
  ctx.require_replicate_elsewhere(step, "bias", bias);
  const Shape bias_shape(std::vector<Axis>{{out, weight.shape.extent(out)}});
  if (!(bias.shape == bias_shape)) {
    ctx.fail(step, "bias",
             "shape mismatch: " + quote(step.str("bias")) + " is " + bias.shape.str() + " but " +
                 quote(step.str("weight")) + " " + weight.shape.str() + " needs " +
                 bias_shape.str());
  }
  if (!(bias.placement(step) == bias_placement)) {
    ctx.fail(step, "bias",
             quote(step.str("bias")) + " must be " + bias_placement.str() + " for a " + form +
                 "-parallel layer, not " + bias.placement(step).str());
  }
}

// A linear's weight against its input: two axes [out, in], `in` contracted with the input's
// axis of that name, `out` a new axis.
void linear_weight_shape_rules(const StepSpec& step, StepContext& ctx, const TensorState& input,
                               const TensorState& weight) {
  const std::string& x_name = step.str("input");
  const std::string& w_name = step.str("weight");
  if (weight.shape.rank() != 2) {
    ctx.fail(
        step, "weight",
        quote(w_name) + " " + weight.shape.str() + " must have two axes [out, in] (y = x W^T)");
  }
  const std::string out = weight.shape[0].name;
  const std::string in = weight.shape[1].name;
  if (!input.shape.has(in)) {
    ctx.fail(step, "weight",
             quote(w_name) + " " + weight.shape.str() + " is [out, in] = [" + out + ", " + in +
                 "] but " + quote(x_name) + " " + input.shape.str() + " has no axis " + quote(in) +
                 " (the convention is W (out, in))");
  }
  if (input.shape.has(out)) {
    ctx.fail(step, "weight",
             quote(w_name) + " " + weight.shape.str() + " produces axis '" + out + "', which " +
                 quote(x_name) + " " + input.shape.str() +
                 " already has; name the output features differently");
  }
  if (input.shape.extent(in) != weight.shape.extent(in)) {
    ctx.fail(step, "weight",
             "shape mismatch: " + quote(w_name) + " " + weight.shape.str() + " contracts " + in +
                 "=" + std::to_string(weight.shape.extent(in)) + " but " + quote(x_name) + " is " +
                 input.shape.str());
  }
}

// linear: W is (out, in); the weight's placement decides the form (ops/linear_plan.hpp).
void linear_rules(const LinearArgs& args, const StepSpec& step, StepContext& ctx) {
  const TensorState& input = ctx.tensor(step, "input");
  const std::string& x_name = step.str("input");
  const std::string& w_name = step.str("weight");
  const TensorState& weight = ctx.tensor(step, "weight");
  linear_weight_shape_rules(step, ctx, input, weight);
  const std::string out = weight.shape[0].name;
  const std::string in = weight.shape[1].name;
  ctx.require_passive(step, "input", input, {in});
  ctx.require_replicate_elsewhere(step, "weight", weight);
  std::string form = "none";
  Placement bias_placement = Placement::replicate();
  Placement output_placement = input.placement(step);
  const Placement& wp = weight.placement(step);
  if (wp.is_partial()) {
    ctx.fail(step, "weight",
             quote(w_name) + " must be Replicate, Shard(" + out + ") or Shard(" + in +
                 "), not Partial(sum)");
  } else if (wp.is_shard() && wp.axis == out) {
    form = "column";
    bias_placement = wp;
    output_placement = Placement::shard(out, wp.split);
    if (!input.placement(step).is_replicate()) {
      ctx.fail(step, "input",
               "column-parallel linear (" + quote(w_name) + " is " + wp.str() +
                   ") needs its input '" + x_name + "' Replicate over the group, but it is " +
                   input.placement(step).str() +
                   "; all-gather it first (a redistribute to \"Replicate\")");
    }
  } else if (wp.is_shard() && wp.axis == in) {
    form = "row";
    output_placement = Placement::partial();
    if (!(input.placement(step) == wp)) {
      ctx.fail(step, "input",
               "row-parallel linear (" + quote(w_name) + " is " + wp.str() + ") needs its input " +
                   quote(x_name) + " " + wp.str() + ", but it is " + input.placement(step).str());
    }
  } else if (wp.is_shard()) {
    ctx.fail(step, "weight",
             quote(w_name) + " " + weight.shape.str() + " is " + wp.str() +
                 "; a weight is sharded on its out axis '" + out +
                 "' (column-parallel) or its in axis " + quote(in) + " (row-parallel)");
  } else if (input.placement(step).is_partial() ||
             (input.placement(step).is_shard() && input.placement(step).axis == in)) {
    ctx.fail(step, "input",
             quote(x_name) + " is " + input.placement(step).str() + " but '" + w_name +
                 "' is Replicate: a Replicate weight needs whole input rows "
                 "(shard the weight on " +
                 quote(in) + " for a row-parallel layer)");
  }
  if (args.parallel && *args.parallel != form) {
    ctx.fail(step, "parallel",
             "parallel = \"" + *args.parallel + "\" but '" + w_name + "' is " + wp.str() +
                 ", which makes the layer " + form + "-parallel" +
                 (form == "none" ? " (not parallel)" : ""));
  }
  if (step.has("bias")) linear_bias_rules(step, ctx, weight, out, form, bias_placement);
  std::vector<Axis> axes = input.shape.axes();
  axes[input.shape.position(in)] = {out, weight.shape.extent(out)};
  ctx.define(step, "output", {Shape(std::move(axes)), input.with(step, output_placement)});
}

}  // namespace

template <>
OpEntry op_entry<OpKind::linear>() {
  using A = LinearArgs;
  return OpEntryBuilder<A>(
             OpKind::linear,
             "y = x W^T (+ b) with W named (out, in), e.g. [ffn, hidden]; the weight's placement "
             "picks the form: Replicate (none), Shard(out) (column-parallel, input Replicate, "
             "output Shard(out)), Shard(in) (row-parallel, input Shard(in), output Partial(sum))")
      .tensor("input", &A::input, "x, with the weight's in axis")
      .tensor("weight", &A::weight, "W, axes [out, in]")
      .optional_tensor("bias", &A::bias,
                       "b, shape [out]: Shard(out) like W when column-parallel, else Replicate")
      .output("output", &A::output, "y: x's shape with in replaced by out")
      .optional_text("parallel", &A::parallel, "assert the form the weight's placement implies",
                     {"none", "column", "row"})
      .rules(linear_rules)
      .build();
}

}  // namespace shardsim
