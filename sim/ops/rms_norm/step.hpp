// Binds an rms_norm scenario step to the dense oracle and the sharded plans:
//   input whole rows (Replicate, Shard(other axis)) -> rms_norm_row_sharded (exact)
//   input Shard(axis)                               -> rms_norm_hidden_sharded (sum of squares)
#pragma once

#include "ops/rms_norm/rms_norm.hpp"
#include "ops/rms_norm/rms_norm_plan.hpp"
#include "runner/steps/step_env.hpp"

namespace shardsim {

template <typename T>
class RmsNormStep final : public StepOp<T> {
 public:
  RmsNormStep(const StepSpec& step, const Scenario&) : args_(step.as<RmsNormArgs>()) {
    params_.axis = args_.axis;
    params_.eps = args_.eps;
  }

  void forward(StepEnv<T>& env) override {
    const std::string& input = args_.input;
    const std::string& output = args_.output;
    const DistTensor<T>& sx = env.sharded_at(input);
    hidden_ = env.world.placement(sx).is_shard() && env.world.placement(sx).axis == params_.axis;
    // Whole rows: a spent x is normalized in its own storage (layer_norm_step.hpp).
    env.set_dense_from(input, output, !hidden_, [&](const Tensor<T>& x, Tensor<T>& y) {
      rms_norm_forward(x, env.dense_opt(args_.weight), params_, y, dense_saved_);
    });
    env.set_dense(output + ".rrms", [&] { return dense_saved_.rrms; });

    if (hidden_) {
      const Tensor<T>& x = env.dense_at(input);
      Tensor<T>& sumsq = env.dense[output + ".sumsq"];
      if (env.oracle) rms_norm_partial_sum_sq(x, params_, x.shape().extent(params_.axis), sumsq);
      env.sharded[output] = rms_norm_hidden_sharded(env.world, sx, env.sharded_opt(args_.weight),
                                                    params_, output, sharded_saved_);
    } else {
      std::vector<Tensor<T>> x_values = env.take_spent_locals(input);
      env.sharded[output] =
          rms_norm_row_sharded(env.world, sx, env.sharded_opt(args_.weight), params_, output,
                               sharded_saved_, std::move(x_values));
    }
  }

  void backward(StepEnv<T>& env) override {
    const std::string& input = args_.input;
    const std::string& output = args_.output;
    if (!env.has_grad(output)) return;
    const std::string weight = args_.weight.value_or("");
    const Tensor<T>& dy = env.dense_at(grad_name(output));
    const Tensor<T>& x = env.dense_at(input);
    const Tensor<T>* w = env.dense_opt(args_.weight);
    Tensor<T> dx;  // dx and dw stay empty placeholders on a process without the oracle
    Tensor<T> dw;
    if (env.oracle) {
      if (w) dw = Tensor<T>(w->shape());
      // dw sums the rows in ascending order (chain_rows under --oracle distributed).
      env.chain_rows({w ? &dw : nullptr}, nullptr, [&] {
        rms_norm_backward(dy, x, w, dense_saved_, params_, dx, w ? &dw : nullptr);
      });
    }

    DistTensor<T> sdy = env.sharded_at(grad_name(output));
    if (hidden_ && !(sdy.layout == env.sharded_at(input).layout)) {
      // The distributed backward works on dy laid out like x.
      sdy = env.world.redistribute(sdy, env.sharded_at(input).layout,
                                   {.tensor = grad_name(output) + "@" + input,
                                    .dense = grad_name(output),
                                    .exact = !sdy.layout.has_partial(),
                                    .inputs = {grad_name(output)}});
      sdy.name = grad_name(output);  // the plan's boundaries keep the oracle's names
    }
    const DistTensor<T>& sx = env.sharded_at(input);
    const DistTensor<T>* sw = env.sharded_opt(args_.weight);
    RmsNormShardedGrads<T> grads;
    if (hidden_) {
      Tensor<T>& sum_dnorm_norm = env.dense[grad_name(output) + ".sum_dnorm_norm"];
      if (env.oracle) {
        rms_norm_backward_sum(dy, x, w, dense_saved_, params_, x.shape().extent(params_.axis),
                              sum_dnorm_norm);
      }
      grads = rms_norm_hidden_sharded_backward(env.world, sdy, sx, sw, sharded_saved_, params_,
                                               grad_name(input), grad_name(weight));
    } else {
      grads = rms_norm_row_sharded_backward(env.world, sdy, sx, sw, sharded_saved_, params_,
                                            grad_name(input), grad_name(weight));
    }
    std::vector<std::string> inputs{input, grad_name(output)};
    if (sw) inputs.push_back(weight);
    if (sw) {
      env.add_grad(weight, std::move(dw), std::move(grads.dweight),
                   {.op = backward_label(OpKind::rms_norm), .inputs = inputs});
    }
    // Row-sharded dx is the dense arithmetic per row (unless dy is Partial: then its addends);
    // hidden-sharded uses an all-reduced sum.
    const bool dx_exact = !hidden_ && !sdy.layout.has_partial();
    env.add_grad(input, std::move(dx), std::move(grads.dx),
                 {.op = backward_label(OpKind::rms_norm), .exact = dx_exact, .inputs = inputs});
  }

 private:
  const RmsNormArgs& args_;
  RmsNormParams params_;
  bool hidden_ = false;
  RmsNormSaved<T> dense_saved_;
  RmsNormShardedSaved<T> sharded_saved_;
};

// --oracle distributed (runner/oracle_rows.hpp): the statistic reduces over the normalized axis.
inline void check_oracle_rows(const RmsNormArgs& args, OracleRowsUse& use) {
  use.reduces_over(args.axis, "norm");
}

}  // namespace shardsim
