// rms_norm: schema and shape/placement rules.
#include "scenario/op_entry.hpp"
#include "scenario/op_rules.hpp"

namespace shardsim {

namespace {

void rms_norm_rules(const RmsNormArgs& args, const StepSpec& step, StepContext& ctx) {
  norm_param_rules(step, ctx, args.axis, norm_input_rules(step, ctx, args.axis));
}

}  // namespace

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
