// gelu: schema and shape/placement rules.
#include "scenario/op_entry.hpp"
#include "scenario/op_rules.hpp"

namespace shardsim {

namespace {

void gelu_rules(const GeluArgs&, const StepSpec& step, StepContext& ctx) {
  elementwise_rules(step, ctx);
}

}  // namespace

template <>
OpEntry op_entry<OpKind::gelu>() {
  using A = GeluArgs;
  return OpEntryBuilder<A>(OpKind::gelu,
                           "GELU, elementwise: x/2 (1 + erf(x/sqrt 2)), or the tanh approximation")
      .tensor("input", &A::input, "x (Shard or Replicate)")
      .output("output", &A::output, "y")
      .text("approximate", &A::approximate, "form (default none, i.e. erf)", {"none", "tanh"})
      .rules(gelu_rules)
      .build();
}

}  // namespace shardsim
