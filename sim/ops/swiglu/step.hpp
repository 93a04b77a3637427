// Binds a swiglu scenario step (y = silu(gate) * up) to the dense oracle and the elementwise
// sharded plan.
#pragma once

#include "ops/add/add_plan.hpp"
#include "ops/swiglu/swiglu.hpp"
#include "ops/swiglu/swiglu_plan.hpp"
#include "runner/steps/step_env.hpp"

namespace shardsim {

template <typename T>
class SwigluStep final : public StepOp<T> {
 public:
  SwigluStep(const StepSpec& step, const Scenario&) : args_(step.as<SwigluArgs>()) {}

  void forward(StepEnv<T>& env) override {
    env.set_dense(args_.output, [&] {
      Tensor<T> y;
      swiglu_forward(env.dense_at(args_.input), env.dense_at(args_.up), y);
      return y;
    });
    env.sharded[args_.output] = swiglu_sharded(env.world, env.sharded_at(args_.input),
                                               env.sharded_at(args_.up), args_.output);
  }

  void backward(StepEnv<T>& env) override {
    const std::string& output = args_.output;
    if (!env.has_grad(output)) return;
    Tensor<T> dg, du;  // stay empty placeholders on a process without the oracle
    if (env.oracle) {
      swiglu_backward(env.dense_at(grad_name(output)), env.dense_at(args_.input),
                      env.dense_at(args_.up), dg, du);
    }
    const DistTensor<T>& g = env.sharded_at(args_.input);
    const DistTensor<T>& held = env.sharded_at(grad_name(output));
    const DistTensor<T> dy =
        align_grad(env.world, held, elementwise_grad_target(g.layout, held.layout));
    DistTensor<T> sdg, sdu;
    swiglu_backward_sharded(env.world, dy, g, env.sharded_at(args_.up), grad_name(args_.input),
                            grad_name(args_.up), sdg, sdu);
    const bool exact = !dy.layout.has_partial();
    const std::vector<std::string> inputs{args_.input, args_.up, dy.name};
    env.add_grad(args_.input, std::move(dg), std::move(sdg),
                 {.op = backward_label(OpKind::swiglu), .exact = exact, .inputs = inputs});
    env.add_grad(args_.up, std::move(du), std::move(sdu),
                 {.op = backward_label(OpKind::swiglu), .exact = exact, .inputs = inputs});
  }

  // Backward reads the gate and the up projection, not the output.
  bool backward_reads_output() const override { return false; }

  // The gate and the up projection, kept for the backward.
  std::vector<std::int64_t> saved_bytes(const StepEnv<T>& env) const override {
    std::vector<std::int64_t> bytes =
        local_bytes(env.sharded.at(args_.input), env.activation_bytes());
    const std::vector<std::int64_t> up =
        local_bytes(env.sharded.at(args_.up), env.activation_bytes());
    for (std::size_t r = 0; r < bytes.size(); ++r) bytes[r] += up[r];
    return bytes;
  }

 private:
  const SwigluArgs& args_;
};

// --oracle distributed (runner/oracle_rows.hpp): each row from that row alone.
inline void check_oracle_rows(const SwigluArgs&, OracleRowsUse&) {}

}  // namespace shardsim
