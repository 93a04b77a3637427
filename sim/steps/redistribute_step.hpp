// An explicit placement change between steps. Backward moves the gradient back to the input's
// placement with the conjugate collective (e.g. a Partial gradient of an all-gathered tensor is
// reduce-scattered back into shards).
#pragma once

#include "sim/steps/step_env.hpp"

namespace shardsim {

template <typename T>
class RedistributeStep final : public StepOp<T> {
 public:
  explicit RedistributeStep(const StepSpec& step) : step_(step) {}

  void forward(StepEnv<T>& env) override {
    const std::string& output = step_.str("output");
    env.dense[output] = env.dense_at(step_.str("input"));  // placement does not change values
    const DistTensor<T>& input = env.sharded_at(step_.str("input"));
    // Moving data is exact; summing Partial addends reorders arithmetic and is not.
    DistTensor<T> moved = env.world.redistribute(
        input, parse_placement(step_.str("to")),
        {.tensor = output, .exact = !input.placement.is_partial(), .inputs = {input.name}});
    moved.name = output;
    env.sharded[output] = std::move(moved);
  }

  void backward(StepEnv<T>& env) override {
    const std::string& input = step_.str("input");
    const std::string& output = step_.str("output");
    if (!env.has_grad(output)) return;
    const DistTensor<T>& grad = env.sharded_at(grad_name(output));
    const Placement& back_to = env.sharded_at(input).placement;
    DistTensor<T> moved = env.world.redistribute(
        grad, back_to,
        {.tensor = grad_name(input) + "@" + output, .dense = grad_name(output),
         .exact = !grad.placement.is_partial(), .inputs = {grad.name}});
    env.add_grad(input, env.dense_at(grad_name(output)), std::move(moved),
                 {.op = "redistribute_backward", .exact = true, .inputs = {grad_name(output)}});
  }

 private:
  const StepSpec& step_;
};

}  // namespace shardsim
