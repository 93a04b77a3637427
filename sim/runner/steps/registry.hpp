// Maps a scenario step to its StepOp: one case per row of SHARDSIM_OP_LIST (op_list.hpp). The
// switch has no default, so a new op without a case fails the build (-Wswitch, -Werror).
#pragma once

#include <memory>

#include "runner/steps/add_step.hpp"
#include "runner/steps/attention_step.hpp"
#include "runner/steps/dropout_step.hpp"
#include "runner/steps/gelu_step.hpp"
#include "runner/steps/layer_norm_step.hpp"
#include "runner/steps/linear_step.hpp"
#include "runner/steps/loss_step.hpp"
#include "runner/steps/redistribute_step.hpp"
#include "runner/steps/rms_norm_step.hpp"

namespace shardsim {

// REQUIRES: `step` outlives the returned op (it keeps a reference to the step's Args).
template <typename T>
std::unique_ptr<StepOp<T>> make_step_op(const StepSpec& step, const Scenario& scenario) {
  switch (step.kind) {
    case OpKind::layer_norm:
      return std::make_unique<LayerNormStep<T>>(step.as<LayerNormArgs>(), scenario);
    case OpKind::rms_norm:
      return std::make_unique<RmsNormStep<T>>(step.as<RmsNormArgs>());
    case OpKind::redistribute:
      return std::make_unique<RedistributeStep<T>>(step.as<RedistributeArgs>(), scenario);
    case OpKind::linear:
      return std::make_unique<LinearStep<T>>(step.as<LinearArgs>(), scenario);
    case OpKind::gelu:
      return std::make_unique<GeluStep<T>>(step.as<GeluArgs>());
    case OpKind::dropout:
      return std::make_unique<DropoutStep<T>>(step.as<DropoutArgs>(), step.index, scenario);
    case OpKind::add:
      return std::make_unique<AddStep<T>>(step.as<AddArgs>());
    case OpKind::mse_loss:
      return std::make_unique<MseLossStep<T>>(step.as<MseLossArgs>(), scenario);
    case OpKind::sliding_window_attention:
      return std::make_unique<SlidingWindowAttentionStep<T>>(step.as<SlidingWindowAttentionArgs>(),
                                                             scenario);
  }
  SHARDSIM_ASSERT(false, "a step whose kind is outside SHARDSIM_OP_LIST");
  return nullptr;
}

}  // namespace shardsim
