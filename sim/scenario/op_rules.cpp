#include "scenario/op_rules.hpp"

namespace shardsim {

void elementwise_rules(const StepSpec& step, StepContext& ctx) {
  const TensorState& input = ctx.tensor(step, "input");
  ctx.require_passive(step, "input", input, {});
  if (input.placement(step).is_partial()) {
    ctx.fail(step, "input",
             std::string(step.op()) +
                 " needs a Shard or Replicate input, not Partial(sum): reduce it "
                 "first (a redistribute)");
  }
  ctx.define(step, "output", {input.shape, input.layout});
}

bool norm_input_rules(const StepSpec& step, StepContext& ctx, const std::string& axis) {
  const std::string& x_name = step.str("input");
  const TensorState& input = ctx.tensor(step, "input");
  if (!input.shape.has(axis)) {
    ctx.fail(
        step, "axis",
        "axis " + quote(axis) + " is not an axis of " + quote(x_name) + " " + input.shape.str());
  }
  if (input.placement(step).is_partial()) {
    ctx.fail(step, "input",
             std::string(step.op()) + " needs a Shard or Replicate input, not Partial(sum)");
  }
  // A Shard(axis) input has no whole row on any rank: distributed statistics, and parameters
  // sharded like the input's features.
  return input.placement(step).is_shard() && input.placement(step).axis == axis;
}

void norm_param_rules(const StepSpec& step, StepContext& ctx, const std::string& axis,
                      bool hidden) {
  const std::string& x_name = step.str("input");
  const TensorState& input = ctx.tensor(step, "input");
  ctx.require_passive(step, "input", input, {axis});
  const Placement param_placement = hidden ? input.placement(step) : Placement::replicate();
  const Shape param_shape(std::vector<Axis>{{axis, input.shape.extent(axis)}});
  for (const char* key : {"weight", "bias"}) {
    if (!step.has(key)) continue;
    const TensorState& param = ctx.tensor(step, key);
    if (!(param.shape == param_shape)) {
      ctx.fail(step, key,
               "shape mismatch: " + quote(step.str(key)) + " is " + param.shape.str() + " but '" +
                   x_name + "' " + input.shape.str() + " needs " + param_shape.str());
    }
    ctx.require_replicate_elsewhere(step, key, param);
    if (!(param.placement(step) == param_placement)) {
      ctx.fail(step, key,
               quote(step.str(key)) + " must be " + param_placement.str() + " (the input '" +
                   x_name + "' is " + input.placement(step).str() + "), not " +
                   param.placement(step).str());
    }
  }
  ctx.define(step, "output", {input.shape, input.layout});
}

}  // namespace shardsim
