// dropout: schema and shape/placement rules.
#include "scenario/op_entry.hpp"
#include "scenario/op_rules.hpp"

namespace shardsim {

namespace {

// The runner's defaults (sim/ops/dropout/step.hpp): the scenario seed, the step index.
void dropout_defaults(DropoutArgs& args, const StepSpec& step, const Scenario& scenario) {
  if (!args.seed) args.seed = scenario.seed;
  if (!args.stream) args.stream = static_cast<std::uint32_t>(step.index);
}

void dropout_rules(const DropoutArgs&, const StepSpec& step, StepContext& ctx) {
  elementwise_rules(step, ctx);
}

}  // namespace

template <>
OpEntry op_entry<OpKind::dropout>() {
  using A = DropoutArgs;
  return OpEntryBuilder<A>(
             OpKind::dropout,
             "dropout with a Philox mask drawn from (seed, stream, forward pass, element index); "
             "records the mask and, for a Shard input, the repetition detector's check")
      .tensor("input", &A::input, "x (Shard or Replicate)")
      .output("output", &A::output, "y = x * mask / (1 - p)")
      .number("p", &A::p, true, "drop probability; 0 disables dropout",
              {.low = 0, .high = 1, .high_open = true})
      .integer("seed", &A::seed, false, "Philox key (default: the scenario seed)", {.low = 0})
      .integer("stream", &A::stream, false,
               "dropout site id, Philox counter word 2 (default: the step index)",
               {.low = 0, .high = 4294967295.0})
      .text("policy", &A::policy,
            "how the sharded program draws its masks (default global; the others are the "
            "seeded bugs, also switched on by the dropout_* faults)",
            {"global", "same_seed", "rank_offset"})
      .rules(dropout_rules)
      .defaults(dropout_defaults)
      .build();
}

}  // namespace shardsim
