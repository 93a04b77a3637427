// Binds a layer_norm scenario step to the dense oracle and the sharded plan.
#pragma once

#include "shardsim/ops/layer_norm.hpp"
#include "shardsim/ops/layer_norm_plan.hpp"
#include "sim/steps/step_env.hpp"

namespace shardsim {

template <typename T>
class LayerNormStep final : public StepOp<T> {
 public:
  explicit LayerNormStep(const StepSpec& step) : step_(step) {
    params_.axis = step.str_or("axis", "hidden");
    params_.eps = step.num_or("eps", 1e-5);
  }

  void forward(StepEnv<T>& env) override {
    const std::string& output = step_.str("output");
    Tensor<T> y;
    layer_norm_forward(env.dense_at(step_.str("input")), env.dense_opt(step_, "weight"),
                       env.dense_opt(step_, "bias"), params_, y, dense_saved_);
    env.dense[output] = std::move(y);
    env.dense[output + ".mean"] = dense_saved_.mean;
    env.dense[output + ".rstd"] = dense_saved_.rstd;

    env.sharded[output] = layer_norm_row_sharded(
        env.world, env.sharded_at(step_.str("input")), env.sharded_opt(step_, "weight"),
        env.sharded_opt(step_, "bias"), params_, output, sharded_saved_);
  }

  void backward(StepEnv<T>& env) override {
    const std::string& input = step_.str("input");
    const std::string& output = step_.str("output");
    if (!env.has_grad(output)) return;
    const std::string weight = step_.str_or("weight", "");
    const std::string bias = step_.str_or("bias", "");

    // Dense oracle.
    const Tensor<T>& dy = env.dense_at(grad_name(output));
    const Tensor<T>* w = env.dense_opt(step_, "weight");
    Tensor<T> dx;
    Tensor<T> dw = w ? Tensor<T>(w->shape()) : Tensor<T>();
    Tensor<T> db = step_.has("bias") ? Tensor<T>(env.dense_at(bias).shape()) : Tensor<T>();
    layer_norm_backward(dy, env.dense_at(input), w, dense_saved_, params_, dx,
                        w ? &dw : nullptr, step_.has("bias") ? &db : nullptr);

    // Sharded: each rank's rows give dx exactly and a Partial share of dweight/dbias.
    const DistTensor<T>& sdy = env.sharded_at(grad_name(output));
    const DistTensor<T>& x = env.sharded_at(input);
    const DistTensor<T>* sw = env.sharded_opt(step_, "weight");
    const int ranks = env.world.size();
    DistTensor<T> sdx = make_dist<T>(grad_name(input), x.global, x.placement, ranks);
    DistTensor<T> sdw, sdb;
    if (sw) sdw = make_dist<T>(grad_name(weight), sw->global, Placement::partial(), ranks);
    if (step_.has("bias")) {
      sdb = make_dist<T>(grad_name(bias), env.sharded_at(bias).global, Placement::partial(), ranks);
    }
    env.world.for_each_rank([&](int r) {
      const LayerNormSaved<T> saved{sharded_saved_.mean.local(r), sharded_saved_.rstd.local(r)};
      layer_norm_backward(sdy.local(r), x.local(r), sw ? &sw->local(r) : nullptr, saved, params_,
                          sdx.local(r), sw ? &sdw.local(r) : nullptr,
                          step_.has("bias") ? &sdb.local(r) : nullptr);
    });
    zero_padding(sdx);
    std::vector<std::string> inputs{input, grad_name(output)};
    if (sw) inputs.push_back(weight);
    // dx per row is the dense arithmetic; dweight/dbias are Partial shares (a reordered sum).
    if (sw) {
      env.add_grad(weight, std::move(dw), std::move(sdw),
                   {.op = "layer_norm_backward", .inputs = inputs});
    }
    if (step_.has("bias")) {
      env.add_grad(bias, std::move(db), std::move(sdb),
                   {.op = "layer_norm_backward", .inputs = inputs});
    }
    env.add_grad(input, std::move(dx), std::move(sdx),
                 {.op = "layer_norm_backward", .exact = true, .inputs = inputs});
  }

 private:
  const StepSpec& step_;
  LayerNormParams params_;
  LayerNormSaved<T> dense_saved_;
  LayerNormShardedSaved<T> sharded_saved_;
};

}  // namespace shardsim
