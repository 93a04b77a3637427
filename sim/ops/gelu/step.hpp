// Binds a gelu scenario step (approximate = "none" (erf) | "tanh") to the dense oracle and the
// elementwise sharded plan.
#pragma once

#include "ops/add/add_plan.hpp"
#include "ops/gelu/gelu.hpp"
#include "ops/gelu/gelu_plan.hpp"
#include "runner/steps/step_env.hpp"

namespace shardsim {

template <typename T>
class GeluStep final : public StepOp<T> {
 public:
  GeluStep(const StepSpec& step, const Scenario&) : args_(step.as<GeluArgs>()) {
    params_.approximate = args_.approximate == "tanh" ? GeluApprox::tanh : GeluApprox::none;
  }

  void forward(StepEnv<T>& env) override {
    const std::string& output = args_.output;
    // A spent x becomes y in its own storage, the oracle's and every rank's (the plan records
    // only its output).
    env.set_dense_from(args_.input, output, true,
                       [&](const Tensor<T>& x, Tensor<T>& y) { gelu_forward(x, params_, y); });
    std::vector<Tensor<T>> x_values = env.take_spent_locals(args_.input);
    env.sharded[output] =
        gelu_sharded(env.world, env.sharded_at(args_.input), params_, output, std::move(x_values));
  }

  void backward(StepEnv<T>& env) override {
    const std::string& input = args_.input;
    const std::string& output = args_.output;
    if (!env.has_grad(output)) return;
    Tensor<T> dx;  // stays the empty placeholder on a process without the oracle
    if (env.oracle)
      gelu_backward(env.dense_at(grad_name(output)), env.dense_at(input), params_, dx);

    const DistTensor<T>& x = env.sharded_at(input);
    const DistTensor<T>& held = env.sharded_at(grad_name(output));
    const DistTensor<T> dy =
        align_grad(env.world, held, elementwise_grad_target(x.layout, held.layout));
    DistTensor<T> sdx = gelu_backward_sharded(env.world, dy, x, params_, grad_name(input));
    env.add_grad(input, std::move(dx), std::move(sdx),
                 {.op = backward_label(OpKind::gelu),
                  .exact = !dy.layout.has_partial(),
                  .inputs = {input, dy.name}});
  }

  // The input, kept for gelu'(x).
  std::vector<std::int64_t> saved_bytes(const StepEnv<T>& env) const override {
    return local_bytes(env.sharded.at(args_.input), env.activation_bytes());
  }

 private:
  const GeluArgs& args_;
  GeluParams params_;
};

// --oracle distributed (runner/oracle_rows.hpp): each row from that row alone.
inline void check_oracle_rows(const GeluArgs&, OracleRowsUse&) {}

}  // namespace shardsim
