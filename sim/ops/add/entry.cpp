// add: schema and shape/placement rules.
#include "scenario/op_entry.hpp"

namespace shardsim {

namespace {

// add: the residual has the input's shape and placement (a Partial sum of Partials is fine).
void add_rules(const AddArgs&, const StepSpec& step, StepContext& ctx) {
  const TensorState& input = ctx.tensor(step, "input");
  const TensorState& residual = ctx.tensor(step, "residual");
  if (!(residual.shape == input.shape)) {
    ctx.fail(step, "residual",
             "shape mismatch: " + quote(step.str("residual")) + " is " + residual.shape.str() +
                 " but '" + step.str("input") + "' is " + input.shape.str());
  }
  if (!(residual.layout == input.layout)) {
    ctx.fail(step, "residual",
             "placement mismatch: " + quote(step.str("residual")) + " is " + residual.layout.str() +
                 " but " + quote(step.str("input")) + " is " + input.layout.str());
  }
  ctx.define(step, "output", {input.shape, input.layout});
}

}  // namespace

template <>
OpEntry op_entry<OpKind::add>() {
  using A = AddArgs;
  return OpEntryBuilder<A>(OpKind::add, "residual add y = input + residual, elementwise")
      .tensor("input", &A::input, "first addend")
      .tensor("residual", &A::residual, "second addend, same shape and placement")
      .output("output", &A::output, "the sum")
      .rules(add_rules)
      .build();
}

}  // namespace shardsim
