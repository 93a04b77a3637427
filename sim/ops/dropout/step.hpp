// Binds a dropout scenario step. The oracle always draws the dense mask with the global policy;
// the sharded plan draws with the step's `policy`, or the policy a dropout fault forces
// (dropout_same_seed, dropout_rank_offset). The k-th forward pass of the step (training step k;
// with [stream], (step - 1) * chunks + chunk) draws with counter word 3 = k: fresh masks every
// pass.
#pragma once

#include "ops/add/add_plan.hpp"
#include "ops/dropout/dropout.hpp"
#include "ops/dropout/dropout_plan.hpp"
#include "runner/steps/step_env.hpp"

namespace shardsim {

template <typename T>
class DropoutStep final : public StepOp<T> {
 public:
  DropoutStep(const StepSpec& step, const Scenario& scenario) : args_(step.as<DropoutArgs>()) {
    const int step_index = step.index;
    params_.p = args_.p;
    params_.seed = args_.seed.value_or(scenario.seed);
    params_.stream = args_.stream.value_or(static_cast<std::uint32_t>(step_index));
    policy_ = parse_dropout_policy(args_.policy);
    if (scenario.has_fault(Fault::dropout_same_seed)) policy_ = DropoutPolicy::same_seed;
    if (scenario.has_fault(Fault::dropout_rank_offset)) policy_ = DropoutPolicy::rank_offset;
  }

  void forward(StepEnv<T>& env) override {
    params_.forward_pass = ++forward_passes_;
    const std::string& input = args_.input;
    const std::string& output = args_.output;
    const DistTensor<T>& sx = env.sharded_at(input);
    const Shape dense_shape = env.dense_shape(sx.global);  // a row block under --oracle distributed
    if (env.oracle) {
      DropoutFrame whole;  // the oracle's mask: by global index, rows included
      whole.global = sx.global;
      if (!(dense_shape == sx.global)) {
        for (const Axis& axis : sx.global.axes()) {
          const bool cut = axis.name == env.rows->axis;
          whole.box.push_back(
              {.begin = cut ? env.rows->begin : 0,
               .end = cut ? env.rows->end : axis.extent,
               .local_extent = cut ? env.rows->end - env.rows->begin : axis.extent});
        }
      }
      dense_mask_ = dropout_mask(dense_shape, whole, params_, DropoutPolicy::global);
    }
    if (!sx.layout.is_replicate()) {
      // No pair of ranks repeats a mask.
      const int ranks = env.world.size();
      env.set_dense(output + ".mask@repetition", [&] {
        return Tensor<T>(Shape({{"rank", ranks}, {"peer", ranks}}));
      });
    }
    env.set_dense(output + ".mask", [&] { return mask_values<T>(dense_shape, dense_mask_); });
    env.set_dense(output, [&] {
      Tensor<T> y;
      dropout_forward(env.dense_at(input), dense_mask_, params_.p, y);
      return y;
    });

    env.sharded[output] = dropout_sharded(env.world, sx, params_, policy_, output, saved_);
  }

  void backward(StepEnv<T>& env) override {
    const std::string& input = args_.input;
    const std::string& output = args_.output;
    if (!env.has_grad(output)) return;
    Tensor<T> dx;  // stays the empty placeholder on a process without the oracle
    if (env.oracle) dropout_backward(env.dense_at(grad_name(output)), dense_mask_, params_.p, dx);

    const DistTensor<T>& x = env.sharded_at(input);
    const DistTensor<T>& held = env.sharded_at(grad_name(output));
    const DistTensor<T> dy =
        align_grad(env.world, held, elementwise_grad_target(x.layout, held.layout));
    DistTensor<T> sdx =
        dropout_backward_sharded(env.world, dy, saved_, params_.p, grad_name(input));
    env.add_grad(input, std::move(dx), std::move(sdx),
                 {.op = backward_label(OpKind::dropout),
                  .exact = !dy.layout.has_partial(),
                  .inputs = {dy.name, output + ".mask"}});
  }

  // The mask, one byte per local element.
  std::vector<std::int64_t> saved_bytes(const StepEnv<T>& env) const override {
    return local_bytes(env.sharded.at(args_.input), 1);
  }

 private:
  const DropoutArgs& args_;
  DropoutParams params_;
  DropoutPolicy policy_ = DropoutPolicy::global;
  std::uint32_t forward_passes_ = 0;
  DropoutMask dense_mask_;
  DropoutShardedSaved saved_;
};

// --oracle distributed (runner/oracle_rows.hpp): each row from that row alone (the mask is
// drawn by global index).
inline void check_oracle_rows(const DropoutArgs&, OracleRowsUse&) {}

}  // namespace shardsim
