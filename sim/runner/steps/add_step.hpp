// Binds an add scenario step: the residual add y = input + residual, elementwise. Backward gives
// both inputs the output's gradient.
#pragma once

#include "shardsim/ops/add.hpp"
#include "shardsim/ops/add_plan.hpp"
#include "sim/runner/steps/step_env.hpp"

namespace shardsim {

template <typename T>
class AddStep final : public StepOp<T> {
 public:
  explicit AddStep(const StepSpec& step) : step_(step) {}

  void forward(StepEnv<T>& env) override {
    const std::string& output = step_.str("output");
    Tensor<T> y;
    add_forward(env.dense_at(step_.str("input")), env.dense_at(step_.str("residual")), y);
    env.dense[output] = std::move(y);
    env.sharded[output] = add_sharded(env.world, env.sharded_at(step_.str("input")),
                                      env.sharded_at(step_.str("residual")), output);
  }

  void backward(StepEnv<T>& env) override {
    const std::string& output = step_.str("output");
    if (!env.has_grad(output)) return;
    const DistTensor<T>& x = env.sharded_at(step_.str("input"));
    const DistTensor<T>& held = env.sharded_at(grad_name(output));
    // Copies: add_grad below may grow grad(input) in place, which can be grad(output)'s source.
    const Tensor<T> dy = env.dense_at(grad_name(output));
    const DistTensor<T> sdy =
        align_grad(env.world, held, elementwise_grad_target(x.placement, held.placement));
    const bool exact = !sdy.placement.is_partial();
    for (const char* key : {"input", "residual"}) {
      env.add_grad(step_.str(key), dy, sdy,
                   {.op = "add_backward", .exact = exact, .inputs = {sdy.name}});
    }
  }

 private:
  const StepSpec& step_;
};

}  // namespace shardsim
