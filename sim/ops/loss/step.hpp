// Binds an mse_loss scenario step: masked MSE over valid tokens, divided once by the global
// valid-token count. With micro-batches (env.micro.index > 0) the oracle side computes the
// micro-batch's sum over its rows (global token identity: rows offset by env.micro.begin) and
// divides it by the whole step's count, which the whole-batch oracle pass counted.
#pragma once

#include "ops/loss/loss.hpp"
#include "ops/loss/loss_plan.hpp"
#include "runner/steps/step_env.hpp"

namespace shardsim {

template <typename T>
class MseLossStep final : public StepOp<T> {
 public:
  MseLossStep(const StepSpec& step, const Scenario& scenario) : args_(step.as<MseLossArgs>()) {
    params_.batch_axis = args_.batch_axis;
    params_.seq_axis = args_.seq_axis;
    params_.feature_axis = args_.feature_axis;
    if (args_.valid_lengths) params_.valid_lengths = *args_.valid_lengths;
    faults_.averaged_twice = scenario.has_fault(Fault::loss_averaged_twice);
    faults_.padding_in_loss = scenario.has_fault(Fault::padding_in_loss);
    faults_.average_of_rank_means = scenario.has_fault(Fault::average_of_rank_means);
    faults_.wrong_axis = scenario.has_fault(Fault::wrong_axis);
    faults_.micro_batch_mean = scenario.has_fault(Fault::micro_batch_mean);
    faults_.local_mean_backward = scenario.has_fault(Fault::fsdp_grad_local_mean);
  }

  void forward(StepEnv<T>& env) override {
    const std::string& output = args_.output;
    T sum = T(0);
    std::int64_t count = 0;
    // The oracle's rows: a micro-batch's, or this process's under --oracle distributed, whose
    // sums continue the previous process's (chain_rows).
    frame_ = LocalFrame{.batch_begin = env.rows ? env.rows->begin : env.micro.begin};
    if (env.oracle) {
      Tensor<T> carried(Shape(), {sum});
      env.chain_rows({&carried}, &count, [&] {
        masked_mse_partial(env.dense_at(args_.input), env.dense_at(args_.target), params_, frame_,
                           carried[0], count, /*carry=*/true);
      });
      sum = carried[0];
    }
    env.set_dense(part_name(output, loss_parts::sum), [&] { return Tensor<T>(Shape(), {sum}); });
    env.set_dense(part_name(output, loss_parts::valid_tokens),
                  [&] { return Tensor<T>(Shape(), {T(count)}); });
    dense_count_ = T(count);
    MicroTokens micro;
    if (env.micro.index > 0) {
      micro = {env.micro.index, env.micro.begin, env.micro.rows};
      if (env.oracle) {
        dense_count_ = env.micro.whole_oracle->at(part_name(output, loss_parts::valid_tokens))[0];
      }
      env.set_dense(part_name(output, loss_parts::step_valid_tokens),
                    [&] { return Tensor<T>(Shape(), {dense_count_}); });
    }
    env.set_dense(output, [&] { return Tensor<T>(Shape(), {T(sum / dense_count_)}); });

    env.sharded[output] =
        masked_mse_sharded(env.world, env.sharded_at(args_.input), env.sharded_at(args_.target),
                           params_, faults_, output, saved_, micro);
  }

  void backward(StepEnv<T>& env) override {
    const std::string& input = args_.input;
    Tensor<T> dy;  // stays the empty placeholder on a process without the oracle
    if (env.oracle) {
      masked_mse_backward(env.dense_at(input), env.dense_at(args_.target), params_, frame_,
                          dense_count_, dy);
    }
    DistTensor<T> sdy =
        masked_mse_backward_sharded(env.world, env.sharded_at(input), env.sharded_at(args_.target),
                                    params_, faults_, saved_, grad_name(input));
    env.add_grad(input, std::move(dy), std::move(sdy),
                 {.op = backward_label(OpKind::mse_loss), .exact = true, .inputs = {input}});
  }

 private:
  const MseLossArgs& args_;
  MaskedMseParams params_;
  LossFaults faults_;
  T dense_count_ = T(0);  // what the oracle divides by: V of the whole step
  LocalFrame frame_;      // the oracle's frame: batch rows offset by the micro-batch's first
  LossShardedSaved<T> saved_;
};

// --oracle distributed (runner/oracle_rows.hpp): the loss sums over the batch axis' rows.
inline void check_oracle_rows(const MseLossArgs& args, OracleRowsUse& use) {
  use.sums_rows(args.batch_axis);
}

}  // namespace shardsim
