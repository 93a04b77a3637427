// The op schemas and fault catalogue the scenario loader accepts, and the per-op shape and
// placement rules used to validate the steps. Each op issue adds its rows here.
#include "sim/scenario_internal.hpp"

namespace shardsim {

const std::vector<OpSchema>& op_schemas() {
  static const std::vector<OpSchema> schemas = {
      {"layer_norm",
       "LayerNorm over one named axis: mean, biased variance, eps inside the sqrt, weight, bias",
       {
           {"input", ParamType::tensor, true, "tensor to normalize", {}},
           {"output", ParamType::output, true, "name of the normalized tensor", {}},
           {"weight", ParamType::tensor, false, "scale, shape [axis]", {}},
           {"bias", ParamType::tensor, false, "shift, shape [axis]", {}},
           {"axis", ParamType::string, false, "normalized axis (default hidden)", {}},
           {"eps", ParamType::number, false, "added to the variance inside the sqrt (default 1e-5)",
            {}},
       }},
      {"redistribute",
       "change a tensor's placement through collectives (all_gather, all_reduce, "
       "reduce_scatter, all_to_all, local slice)",
       {
           {"input", ParamType::tensor, true, "tensor to move", {}},
           {"output", ParamType::output, true, "name of the moved tensor", {}},
           {"to", ParamType::placement, true, "target placement", {}},
       }},
  };
  return schemas;
}

const std::vector<FaultInfo>& fault_catalogue() {
  static const std::vector<FaultInfo> faults = {};
  return faults;
}

void infer_step(const StepSpec& step, StepContext& ctx) {
  const TensorState& input = ctx.tensor(step, "input");
  if (step.op == "layer_norm") {
    const std::string axis = step.str_or("axis", "hidden");
    if (!input.shape.has(axis)) {
      ctx.fail(step, "axis", "axis '" + axis + "' is not an axis of '" + step.str("input") + "' " +
                                 input.shape.str());
    }
    if (step.num_or("eps", 1e-5) < 0) ctx.fail(step, "eps", "eps must be >= 0");
    if (input.placement.is_partial()) {
      ctx.fail(step, "input", "layer_norm needs a Shard or Replicate input, not Partial(sum)");
    }
    if (input.placement.is_shard() && input.placement.axis == axis) {
      ctx.fail(step, "input",
               "'" + step.str("input") + "' is sharded on the normalized axis '" + axis +
                   "'; a hidden-sharded LayerNorm plan is not available yet");
    }
    const Shape param_shape(std::vector<Axis>{{axis, input.shape.extent(axis)}});
    for (const char* key : {"weight", "bias"}) {
      if (!step.has(key)) continue;
      const TensorState& param = ctx.tensor(step, key);
      if (!(param.shape == param_shape)) {
        ctx.fail(step, key,
                 "shape mismatch: '" + step.str(key) + "' is " + param.shape.str() + " but '" +
                     step.str("input") + "' " + input.shape.str() + " needs " + param_shape.str());
      }
      if (!param.placement.is_replicate()) {
        ctx.fail(step, key, "'" + step.str(key) + "' must be Replicate, not " +
                                param.placement.str());
      }
    }
    ctx.define(step, "output", {input.shape, input.placement});
  } else if (step.op == "redistribute") {
    const Placement to = ctx.placement(step, "to");
    if (to.is_shard() && !input.shape.has(to.axis)) {
      ctx.fail(step, "to", "unknown axis '" + to.axis + "' in placement " + to.str() + ": '" +
                               step.str("input") + "' has axes " + input.shape.str());
    }
    ctx.define(step, "output", {input.shape, to});
  }
}

}  // namespace shardsim
