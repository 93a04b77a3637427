// redistribute: schema and rules.
#include "sim/scenario/op_entry.hpp"

namespace shardsim {

namespace {

void redistribute_rules(const RedistributeArgs& args, const StepSpec& step, StepContext& ctx) {
  const TensorState& input = ctx.tensor(step, "input");
  if (args.to.is_shard() && !input.shape.has(args.to.axis)) {
    ctx.fail(step, "to",
             "unknown axis " + quote(args.to.axis) + " in placement " + args.to.str() + ": " +
                 quote(step.str("input")) + " has axes " + input.shape.str());
  }
  ctx.define(step, "output", {input.shape, args.to});
}

}  // namespace

template <>
OpEntry op_entry<OpKind::redistribute>() {
  using A = RedistributeArgs;
  return OpEntryBuilder<A>(OpKind::redistribute,
                           "change a tensor's placement through collectives (all_gather, "
                           "all_reduce, reduce_scatter, all_to_all, local slice)")
      .tensor("input", &A::input, "tensor to move")
      .output("output", &A::output, "name of the moved tensor")
      .placement("to", &A::to, "target placement")
      .rules(redistribute_rules)
      .build();
}

}  // namespace shardsim
