// layer_norm and rms_norm: schema and shape/placement rules.
#include <limits>

#include "scenario/op_entry.hpp"

namespace shardsim {

namespace {

// eps is used as float(eps) in f32 runs: beyond the largest float it would be inf.
const ParamBounds kEpsBounds{.low = 0,
                             .high = std::numeric_limits<float>::max(),
                             .note = "(the f32 range: f32 runs use float(eps))"};

// The shared rules: a Shard or Replicate input with the normalized axis, parameters of shape
// [axis] held like the input's features. `layer_norm` is null for RMSNorm, which has one
// distributed statistic (the all-reduced sum of squares) and no mode to choose.
void norm_rules(const StepSpec& step, StepContext& ctx, const std::string& axis,
                const LayerNormArgs* layer_norm) {
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
  const bool hidden = input.placement(step).is_shard() && input.placement(step).axis == axis;
  if (layer_norm) {
    const std::optional<std::string>& stats = layer_norm->stats;
    if (hidden && !stats) {
      ctx.fail(step, "input",
               quote(x_name) + " is " + input.placement(step).str() +
                   ", sharded on the normalized axis '" + axis +
                   "': choose the distributed statistics with stats = \"sum_sumsq\", "
                   "\"welford\" or \"redistribute\"");
    }
    if (!hidden && stats) {
      ctx.fail(step, "stats",
               "stats applies only to an input sharded on the normalized axis '" + axis + "'; " +
                   quote(x_name) + " is " + input.placement(step).str());
    }
    if (step.has("token_axis") && stats != "redistribute") {
      ctx.fail(step, "token_axis",
               "token_axis is the token axis of stats = \"redistribute\"; it means nothing " +
                   (stats ? "with stats = \"" + *stats + "\"" : std::string("without stats")));
    }
    const std::string& token_axis = layer_norm->token_axis;
    if (stats == "redistribute" && (!input.shape.has(token_axis) || token_axis == axis)) {
      ctx.fail(step, step.has("token_axis") ? "token_axis" : "stats",
               "the redistribute mode needs a token axis other than " + quote(axis) + ": '" +
                   token_axis + "' is not one of " + input.shape.str());
    }
  }
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

void layer_norm_rules(const LayerNormArgs& args, const StepSpec& step, StepContext& ctx) {
  norm_rules(step, ctx, args.axis, &args);
}

void rms_norm_rules(const RmsNormArgs& args, const StepSpec& step, StepContext& ctx) {
  norm_rules(step, ctx, args.axis, nullptr);
}

}  // namespace

template <>
OpEntry op_entry<OpKind::layer_norm>() {
  using A = LayerNormArgs;
  return OpEntryBuilder<A>(
             OpKind::layer_norm,
             "LayerNorm over one named axis: mean, biased variance, eps inside the sqrt, weight, "
             "bias")
      .tensor("input", &A::input, "tensor to normalize")
      .output("output", &A::output, "name of the normalized tensor")
      .optional_tensor("weight", &A::weight,
                       "scale, shape [axis]: Replicate, or Shard(axis) for a Shard(axis) input")
      .optional_tensor("bias", &A::bias, "shift, shape [axis], placed like weight")
      .text("axis", &A::axis, "normalized axis (default hidden)")
      .number("eps", &A::eps, false, "added to the variance inside the sqrt (default 1e-5)",
              kEpsBounds)
      .optional_text("stats", &A::stats,
                     "distributed statistics when the input is Shard(axis) (required then): "
                     "all-reduce of sum and sum of squares (cancellation risk when |mean| >> "
                     "std), Chan's parallel merge of (count, mean, M2), or all-to-all to token "
                     "shards and back",
                     {"sum_sumsq", "welford", "redistribute"})
      .text("token_axis", &A::token_axis,
            "axis the redistribute mode shards tokens on (default seq; only with stats = "
            "\"redistribute\")")
      .rules(layer_norm_rules)
      .build();
}

template <>
OpEntry op_entry<OpKind::rms_norm>() {
  using A = RmsNormArgs;
  return OpEntryBuilder<A>(
             OpKind::rms_norm,
             "RMSNorm over one named axis: x / sqrt(mean(x^2) + eps) * weight; its own statistic "
             "(rrms), no mean, no bias; Shard(axis) input all-reduces the sum of squares")
      .tensor("input", &A::input, "tensor to normalize")
      .output("output", &A::output, "name of the normalized tensor")
      .optional_tensor("weight", &A::weight,
                       "scale, shape [axis]: Replicate, or Shard(axis) for a Shard(axis) input")
      .text("axis", &A::axis, "normalized axis (default hidden)")
      .number("eps", &A::eps, false, "added to the mean square inside the sqrt (default 1e-5)",
              kEpsBounds)
      .rules(rms_norm_rules)
      .build();
}

}  // namespace shardsim
