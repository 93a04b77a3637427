// Binds a layer_norm scenario step to the dense oracle and the sharded plan.
#pragma once

#include "shardsim/ops/layer_norm.hpp"
#include "shardsim/ops/layer_norm_plan.hpp"
#include "sim/steps/step_env.hpp"

namespace shardsim {

template <typename T>
void layer_norm_step(StepEnv<T>& env, const StepSpec& step) {
  LayerNormParams params;
  params.axis = step.str_or("axis", "hidden");
  params.eps = step.num_or("eps", 1e-5);
  const std::string& output = step.str("output");

  // Dense oracle on the global tensors.
  Tensor<T> y;
  LayerNormSaved<T> saved;
  layer_norm_forward(env.dense_at(step.str("input")), env.dense_opt(step, "weight"),
                     env.dense_opt(step, "bias"), params, y, saved);
  env.dense[output] = std::move(y);
  env.dense[output + ".mean"] = std::move(saved.mean);
  env.dense[output + ".rstd"] = std::move(saved.rstd);

  // Sharded plan.
  LayerNormShardedSaved<T> sharded_saved;
  env.sharded[output] = layer_norm_row_sharded(
      env.world, env.sharded_at(step.str("input")), env.sharded_opt(step, "weight"),
      env.sharded_opt(step, "bias"), params, output, sharded_saved);
}

}  // namespace shardsim
