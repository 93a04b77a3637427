// An explicit placement change between steps.
#pragma once

#include "sim/steps/step_env.hpp"

namespace shardsim {

template <typename T>
void redistribute_step(StepEnv<T>& env, const StepSpec& step) {
  const std::string& output = step.str("output");
  // The oracle's value does not change with placement.
  env.dense[output] = env.dense_at(step.str("input"));
  const DistTensor<T>& input = env.sharded_at(step.str("input"));
  // Moving data is exact; summing Partial addends reorders arithmetic and is not.
  const bool exact = !input.placement.is_partial();
  DistTensor<T> moved = env.world.redistribute(input, parse_placement(step.str("to")),
                                               {"", output, "", exact, "collective"});
  moved.name = output;
  env.sharded[output] = std::move(moved);
}

}  // namespace shardsim
