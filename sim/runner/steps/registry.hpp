// Maps a scenario step to its StepOp. Each op issue adds its case here.
#pragma once

#include <memory>

#include "sim/runner/steps/add_step.hpp"
#include "sim/runner/steps/attention_step.hpp"
#include "sim/runner/steps/dropout_step.hpp"
#include "sim/runner/steps/gelu_step.hpp"
#include "sim/runner/steps/layer_norm_step.hpp"
#include "sim/runner/steps/linear_step.hpp"
#include "sim/runner/steps/loss_step.hpp"
#include "sim/runner/steps/redistribute_step.hpp"
#include "sim/runner/steps/rms_norm_step.hpp"

namespace shardsim {

template <typename T>
std::unique_ptr<StepOp<T>> make_step_op(const StepSpec& step, const Scenario& scenario) {
  if (step.op == "layer_norm") return std::make_unique<LayerNormStep<T>>(step, scenario);
  if (step.op == "redistribute") return std::make_unique<RedistributeStep<T>>(step);
  if (step.op == "mse_loss") return std::make_unique<MseLossStep<T>>(step, scenario);
  if (step.op == "rms_norm") return std::make_unique<RmsNormStep<T>>(step);
  if (step.op == "linear") return std::make_unique<LinearStep<T>>(step);
  if (step.op == "gelu") return std::make_unique<GeluStep<T>>(step);
  if (step.op == "dropout") return std::make_unique<DropoutStep<T>>(step, scenario);
  if (step.op == "add") return std::make_unique<AddStep<T>>(step);
  if (step.op == "sliding_window_attention") {
    return std::make_unique<SlidingWindowAttentionStep<T>>(step, scenario);
  }
  SHARDSIM_ASSERT(false, "the loader accepted an op the runner does not know");
  return nullptr;
}

}  // namespace shardsim
