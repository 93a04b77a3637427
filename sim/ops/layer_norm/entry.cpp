// layer_norm: schema and shape/placement rules.
#include "scenario/op_entry.hpp"
#include "scenario/op_rules.hpp"

namespace shardsim {

namespace {

void layer_norm_rules(const LayerNormArgs& args, const StepSpec& step, StepContext& ctx) {
  const std::string& axis = args.axis;
  const std::string& x_name = step.str("input");
  const TensorState& input = ctx.tensor(step, "input");
  const bool hidden = norm_input_rules(step, ctx, axis);
  const std::optional<std::string>& stats = args.stats;
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
  const std::string& token_axis = args.token_axis;
  if (stats == "redistribute" && (!input.shape.has(token_axis) || token_axis == axis)) {
    ctx.fail(step, step.has("token_axis") ? "token_axis" : "stats",
             "the redistribute mode needs a token axis other than " + quote(axis) + ": '" +
                 token_axis + "' is not one of " + input.shape.str());
  }
  norm_param_rules(step, ctx, axis, hidden);
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

}  // namespace shardsim
