// Binds an mse_loss scenario step: masked MSE over valid tokens, divided once by the global
// valid-token count.
#pragma once

#include "shardsim/ops/loss.hpp"
#include "shardsim/ops/loss_plan.hpp"
#include "sim/runner/steps/step_env.hpp"

namespace shardsim {

template <typename T>
class MseLossStep final : public StepOp<T> {
 public:
  MseLossStep(const StepSpec& step, const Scenario& scenario) : step_(step) {
    params_.batch_axis = step.str_or("batch_axis", "batch");
    params_.seq_axis = step.str_or("seq_axis", "seq");
    params_.feature_axis = step.str_or("feature_axis", "hidden");
    if (step.has("valid_lengths")) params_.valid_lengths = step.ints("valid_lengths");
    faults_.averaged_twice = scenario.has_fault("loss_averaged_twice");
    faults_.padding_in_loss = scenario.has_fault("padding_in_loss");
    faults_.average_of_rank_means = scenario.has_fault("average_of_rank_means");
    faults_.wrong_axis = scenario.has_fault("wrong_axis");
  }

  void forward(StepEnv<T>& env) override {
    const std::string& output = step_.str("output");
    const Tensor<T>& y = env.dense_at(step_.str("input"));
    const Tensor<T>& target = env.dense_at(step_.str("target"));
    T sum;
    std::int64_t count = 0;
    masked_mse_partial(y, target, params_, LocalFrame{}, sum, count);
    dense_count_ = T(count);
    env.dense[output + ".sum"] = Tensor<T>(Shape(), {sum});
    env.dense[output + ".valid_tokens"] = Tensor<T>(Shape(), {dense_count_});
    env.dense[output] = Tensor<T>(Shape(), {T(sum / dense_count_)});

    env.sharded[output] = masked_mse_sharded(env.world, env.sharded_at(step_.str("input")),
                                             env.sharded_at(step_.str("target")), params_, faults_,
                                             output, saved_);
  }

  void backward(StepEnv<T>& env) override {
    const std::string& input = step_.str("input");
    Tensor<T> dy;
    masked_mse_backward(env.dense_at(input), env.dense_at(step_.str("target")), params_,
                        LocalFrame{}, dense_count_, dy);
    DistTensor<T> sdy = masked_mse_backward_sharded(env.world, env.sharded_at(input),
                                                    env.sharded_at(step_.str("target")), params_,
                                                    faults_, saved_, grad_name(input));
    env.add_grad(input, std::move(dy), std::move(sdy),
                 {.op = "mse_loss_backward", .exact = true, .inputs = {input}});
  }

 private:
  const StepSpec& step_;
  MaskedMseParams params_;
  LossFaults faults_;
  T dense_count_ = T(0);
  LossShardedSaved<T> saved_;
};

}  // namespace shardsim
