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
  // A gather on this dim must not cut through a later dim's shards of the same axis (their
  // pieces of it would not be contiguous); DTensor has the same rule without _StridedShard.
  const Placement& from = input.placement(step);
  if (from.is_shard() && !(args.to == from)) {
    for (int d = step.mesh_dim + 1; d < input.layout.ndim(); ++d) {
      const Placement& later = input.layout.on(d);
      if (later.is_shard() && later.axis == from.axis) {
        ctx.fail(step, "to",
                 "'" + step.str("input") + "' is " + input.layout.str() + ": its '" + from.axis +
                     "' is sharded again on a later mesh dim, "
                     "so it cannot be gathered on this one; move the later dim first");
      }
    }
  }
  // Likewise a shard on this dim of an axis a later dim already shards: the later dim's pieces
  // would have to be re-cut (each member holds a piece of the wrong parent).
  if (args.to.is_shard() && !(args.to == from)) {
    for (int d = step.mesh_dim + 1; d < input.layout.ndim(); ++d) {
      const Placement& later = input.layout.on(d);
      if (later.is_shard() && later.axis == args.to.axis) {
        ctx.fail(step, "to",
                 quote(step.str("input")) + " is " + input.layout.str() + ": its " +
                     quote(args.to.axis) + " is already sharded on a later mesh dim, so this "
                     "dim cannot shard it under that one; gather the later dim first");
      }
    }
  }
  ctx.define(step, "output", {input.shape, input.with(step, args.to)});
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
