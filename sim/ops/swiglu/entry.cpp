// swiglu: schema and shape/placement rules.
#include "scenario/op_entry.hpp"

namespace shardsim {

namespace {

// The gate (`input`) and the up projection agree in shape and placement, Shard or Replicate (SwiGLU
// is not linear in a Partial addend); the output keeps them.
void swiglu_rules(const SwigluArgs&, const StepSpec& step, StepContext& ctx) {
  const TensorState& gate = ctx.tensor(step, "input");
  const TensorState& up = ctx.tensor(step, "up");
  for (const char* key : {"input", "up"}) {
    const TensorState& operand = ctx.tensor(step, key);
    ctx.require_passive(step, key, operand, {});
    if (operand.placement(step).is_partial()) {
      ctx.fail(step, key,
               "swiglu needs a Shard or Replicate " + quote(step.str(key)) +
                   ", not Partial(sum): reduce it first (a redistribute)");
    }
  }
  if (!(up.shape == gate.shape)) {
    ctx.fail(step, "up",
             "shape mismatch: " + quote(step.str("up")) + " is " + up.shape.str() + " but '" +
                 step.str("input") + "' is " + gate.shape.str());
  }
  if (!(up.layout == gate.layout)) {
    ctx.fail(step, "up",
             "placement mismatch: " + quote(step.str("up")) + " is " + up.layout.str() + " but " +
                 quote(step.str("input")) + " is " + gate.layout.str());
  }
  ctx.define(step, "output", {gate.shape, gate.layout});
}

}  // namespace

template <>
OpEntry op_entry<OpKind::swiglu>() {
  using A = SwigluArgs;
  return OpEntryBuilder<A>(OpKind::swiglu,
                           "SwiGLU, elementwise: y = silu(input) * up, silu(g) = g / (1 + exp(-g)) "
                           "(the Llama MLP's gated unit)")
      .tensor("input", &A::input, "g, the gate projection (Shard or Replicate)")
      .tensor("up", &A::up, "u, the up projection: the shape and placement of input")
      .output("output", &A::output, "y")
      .rules(swiglu_rules)
      .build();
}

}  // namespace shardsim
