// redistribute: schema and rules.
#include "scenario/op_entry.hpp"

namespace shardsim {

namespace {

void redistribute_rules(const RedistributeArgs& args, const StepSpec& step, StepContext& ctx) {
  const TensorState& input = ctx.tensor(step, "input");
  if (args.to.is_shard() && !input.shape.has(args.to.axis)) {
    ctx.fail(step, "to",
             "unknown axis " + quote(args.to.axis) + " in placement " + args.to.str() + ": " +
                 quote(step.str("input")) + " has axes " + input.shape.str());
  }
  // A later mesh dim's shards of the same axis nest inside this dim's pieces, so this dim may
  // neither gather such an axis (the later pieces would not be contiguous) nor shard it (each
  // later member holds a piece of the wrong parent); DTensor has the same rule without
  // _StridedShard.
  const Placement& from = input.placement(step);
  auto later_shards = [&](const std::string& axis) {
    for (int d = step.mesh_dim + 1; d < input.layout.ndim(); ++d) {
      const Placement& later = input.layout.on(d);
      if (later.is_shard() && later.axis == axis) return true;
    }
    return false;
  };
  if (!(args.to == from) && from.is_shard() && later_shards(from.axis)) {
    ctx.fail(step, "to",
             quote(step.str("input")) + " is " + input.layout.str() + ": its " + quote(from.axis) +
                 " is sharded again on a later mesh dim, "
                 "so it cannot be gathered on this one; move the later dim first");
  }
  if (!(args.to == from) && args.to.is_shard() && later_shards(args.to.axis)) {
    ctx.fail(step, "to",
             quote(step.str("input")) + " is " + input.layout.str() + ": its " +
                 quote(args.to.axis) +
                 " is already sharded on a later mesh dim, so this "
                 "dim cannot shard it under that one; gather the later dim first");
  }
  const Layout moved = input.with(step, args.to);
  if (const std::string problem = ctx.mesh ? moved.problem(*ctx.mesh) : std::string();
      !problem.empty()) {
    ctx.fail(step, "to", quote(step.str("input")) + " would be " + moved.str() + ": " + problem);
  }
  ctx.define(step, "output", {input.shape, moved});
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
