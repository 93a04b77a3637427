// Maps a scenario step to its StepOp. Each op issue adds its case here.
#pragma once

#include <memory>

#include "sim/steps/layer_norm_step.hpp"
#include "sim/steps/loss_step.hpp"
#include "sim/steps/redistribute_step.hpp"

namespace shardsim {

template <typename T>
std::unique_ptr<StepOp<T>> make_step_op(const StepSpec& step, const Scenario& scenario) {
  if (step.op == "layer_norm") return std::make_unique<LayerNormStep<T>>(step);
  if (step.op == "redistribute") return std::make_unique<RedistributeStep<T>>(step);
  if (step.op == "mse_loss") return std::make_unique<MseLossStep<T>>(step, scenario);
  SHARDSIM_ASSERT(false, "the loader accepted an op the runner does not know");
  return nullptr;
}

}  // namespace shardsim
