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
      {"mse_loss",
       "masked MSE: sum over valid tokens of sum_h (y - target)^2, divided once by the global "
       "valid-token count",
       {
           {"input", ParamType::tensor, true, "prediction", {}},
           {"target", ParamType::tensor, true, "target, same shape and placement as input", {}},
           {"output", ParamType::output, true, "name of the scalar loss", {}},
           {"valid_lengths", ParamType::integer_list, false,
            "valid tokens per batch element (token (b, s) is valid iff s < valid_lengths[b]); "
            "default: all valid",
            {}},
           {"batch_axis", ParamType::string, false, "default batch", {}},
           {"seq_axis", ParamType::string, false, "default seq", {}},
           {"feature_axis", ParamType::string, false, "default hidden", {}},
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
  } else if (step.op == "mse_loss") {
    const TensorState& target = ctx.tensor(step, "target");
    if (!(target.shape == input.shape)) {
      ctx.fail(step, "target", "shape mismatch: '" + step.str("target") + "' is " +
                                   target.shape.str() + " but '" + step.str("input") + "' is " +
                                   input.shape.str());
    }
    if (!(target.placement == input.placement)) {
      ctx.fail(step, "target", "placement mismatch: '" + step.str("target") + "' is " +
                                   target.placement.str() + " but '" + step.str("input") +
                                   "' is " + input.placement.str());
    }
    const std::string batch = step.str_or("batch_axis", "batch");
    const std::string seq = step.str_or("seq_axis", "seq");
    const std::string feature = step.str_or("feature_axis", "hidden");
    for (const auto& [key, axis] : {std::pair{"batch_axis", batch}, {"seq_axis", seq},
                                    {"feature_axis", feature}}) {
      if (!input.shape.has(axis)) {
        ctx.fail(step, key, "axis '" + axis + "' is not an axis of '" + step.str("input") + "' " +
                                input.shape.str());
      }
    }
    if (input.placement.is_partial() ||
        (input.placement.is_shard() && input.placement.axis != batch &&
         input.placement.axis != seq)) {
      ctx.fail(step, "input", "mse_loss needs whole tokens: Replicate or Shard(" + batch +
                                  ") or Shard(" + seq + "), not " + input.placement.str());
    }
    if (step.has("valid_lengths")) {
      const auto& lengths = step.ints("valid_lengths");
      const std::int64_t batch_size = input.shape.extent(batch);
      if (static_cast<std::int64_t>(lengths.size()) != batch_size) {
        ctx.fail(step, "valid_lengths", "needs one length per batch element (" +
                                            std::to_string(batch_size) + "), got " +
                                            std::to_string(lengths.size()));
      }
      std::int64_t total = 0;
      for (std::int64_t n : lengths) {
        if (n < 0 || n > input.shape.extent(seq)) {
          ctx.fail(step, "valid_lengths", "each length must be in [0, " +
                                              std::to_string(input.shape.extent(seq)) + "]");
        }
        total += n;
      }
      if (total == 0) ctx.fail(step, "valid_lengths", "at least one token must be valid");
    }
    ctx.define(step, "output", {Shape(), Placement::replicate()});
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
