// Binds an add scenario step: the residual add y = input + residual, elementwise. Backward gives
// both inputs the output's gradient.
#pragma once

#include "ops/add/add.hpp"
#include "ops/add/add_plan.hpp"
#include "runner/steps/step_env.hpp"

namespace shardsim {

template <typename T>
class AddStep final : public StepOp<T> {
 public:
  AddStep(const StepSpec& step, const Scenario&) : args_(step.as<AddArgs>()) {}

  void forward(StepEnv<T>& env) override {
    const std::string& output = args_.output;
    env.set_dense(output, [&] {
      Tensor<T> y;
      add_forward(env.dense_at(args_.input), env.dense_at(args_.residual), y);
      return y;
    });
    env.sharded[output] =
        add_sharded(env.world, env.sharded_at(args_.input), env.sharded_at(args_.residual), output);
  }

  void backward(StepEnv<T>& env) override {
    const std::string& output = args_.output;
    if (!env.has_grad(output)) return;
    const DistTensor<T>& x = env.sharded_at(args_.input);
    const DistTensor<T>& held = env.sharded_at(grad_name(output));
    // Copies: add_grad below may grow grad(input) in place, which can be grad(output)'s source.
    const Tensor<T> dy = env.dense_at(grad_name(output));
    const DistTensor<T> sdy =
        align_grad(env.world, held, elementwise_grad_target(x.layout, held.layout));
    const bool exact = !sdy.layout.has_partial();
    for (const std::string* addend : {&args_.input, &args_.residual}) {
      env.add_grad(*addend, dy, sdy,
                   {.op = backward_label(OpKind::add), .exact = exact, .inputs = {sdy.name}});
    }
  }

 private:
  const AddArgs& args_;
};

// --oracle distributed (runner/oracle_rows.hpp): each row from that row alone.
inline void check_oracle_rows(const AddArgs&, OracleRowsUse&) {}

}  // namespace shardsim
