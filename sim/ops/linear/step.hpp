// Binds a linear scenario step (y = x W^T + b, W named (out, in)) to the dense oracle and the
// sharded plan; the weight's placement picks the form (ops/linear_plan.hpp).
#pragma once

#include "ops/linear/linear.hpp"
#include "ops/linear/linear_plan.hpp"
#include "runner/steps/step_env.hpp"

namespace shardsim {

template <typename T>
class LinearStep final : public StepOp<T> {
 public:
  LinearStep(const StepSpec& step, const Scenario& scenario) : args_(step.as<LinearArgs>()) {
    faults_.row_bias_every_rank = scenario.has_fault(Fault::row_bias_every_rank);
    faults_.column_backward_unreduced = scenario.has_fault(Fault::column_backward_unreduced);
  }

  void forward(StepEnv<T>& env) override {
    const std::string& output = args_.output;
    const Shape& weight = env.sharded_at(args_.weight).global;
    params_.out_axis = weight[0].name;  // the convention: W is (out, in)
    params_.in_axis = weight[1].name;
    env.set_dense(output, [&] {
      Tensor<T> y;
      linear_forward(env.dense_at(args_.input), env.dense_at(args_.weight),
                     env.dense_opt(args_.bias), params_, y);
      return y;
    });

    env.sharded[output] =
        linear_sharded(env.world, env.sharded_at(args_.input), env.sharded_at(args_.weight),
                       env.sharded_opt(args_.bias), params_, output, faults_);
  }

  void backward(StepEnv<T>& env) override {
    const std::string& input = args_.input;
    const std::string& weight = args_.weight;
    const std::string& output = args_.output;
    if (!env.has_grad(output)) return;
    const bool has_bias = args_.bias.has_value();
    const std::string bias = args_.bias.value_or("");

    // Dense oracle (empty placeholders on a process without it).
    Tensor<T> dx;
    Tensor<T> dw;
    Tensor<T> db;
    if (env.oracle) {
      const Tensor<T>& w = env.dense_at(weight);
      dw = Tensor<T>(w.shape());
      if (has_bias) db = Tensor<T>(env.dense_at(bias).shape());
      // dW and db sum the rows in ascending order (chain_rows under --oracle distributed).
      env.chain_rows({&dw, has_bias ? &db : nullptr}, nullptr, [&] {
        linear_backward(env.dense_at(grad_name(output)), env.dense_at(input), w, params_, dx, &dw,
                        has_bias ? &db : nullptr);
      });
    }

    // Sharded.
    LinearShardedGrads<T> grads =
        linear_backward_sharded(env.world, env.sharded_at(grad_name(output)), env.sharded_at(input),
                                env.sharded_at(weight), env.sharded_opt(args_.bias), params_,
                                grad_name(input), grad_name(weight), grad_name(bias), faults_);
    env.add_grad(weight, std::move(dw), std::move(grads.dweight),
                 {.op = backward_label(OpKind::linear),
                  .exact = grads.dweight_exact,
                  .inputs = {input, grads.dy_name}});
    if (has_bias) {
      env.add_grad(bias, std::move(db), std::move(grads.dbias),
                   {.op = backward_label(OpKind::linear),
                    .exact = grads.dbias_exact,
                    .inputs = {grads.dy_name}});
    }
    env.add_grad(input, std::move(dx), std::move(grads.dx),
                 {.op = backward_label(OpKind::linear),
                  .exact = grads.dx_exact,
                  .inputs = {weight, grads.dy_name}});
  }

  // The input, kept for dW = dy^T x (for a column-parallel layer, the all-gathered input).
  std::vector<std::int64_t> saved_bytes(const StepEnv<T>& env) const override {
    return local_bytes(env.sharded.at(args_.input), env.activation_bytes());
  }

 private:
  const LinearArgs& args_;
  LinearParams params_;
  LinearFaults faults_;
};

// --oracle distributed (runner/oracle_rows.hpp): each row from that row alone (in training the
// weight gradient sums over rows, which the runner carries for every parameter).
inline void check_oracle_rows(const LinearArgs&, OracleRowsUse&) {}

}  // namespace shardsim
