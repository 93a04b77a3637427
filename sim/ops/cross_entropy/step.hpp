// Binds a cross_entropy scenario step to the dense oracle (every class of every token at once)
// and the vocab-parallel sharded plan. The labels are an i64 tensor of the scenario, read by
// global token index on both sides. With micro-batches (env.micro.index > 0) the oracle side sums
// the micro-batch's tokens and divides by the whole step's count, which the whole-batch oracle
// pass counted, as mse_loss does.
#pragma once

#include "ops/cross_entropy/cross_entropy.hpp"
#include "ops/cross_entropy/cross_entropy_plan.hpp"
#include "runner/steps/step_env.hpp"

namespace shardsim {

template <typename T>
class CrossEntropyStep final : public StepOp<T> {
 public:
  CrossEntropyStep(const StepSpec& step, const Scenario& scenario)
      : args_(step.as<CrossEntropyArgs>()) {
    const TensorSpec* labels = scenario.find_ids(args_.labels);
    SHARDSIM_ASSERT(labels != nullptr, "cross_entropy: the loader checked the labels");
    labels_shape_ = labels->shape;
    ids_ = labels->ids;
    const Scenario::TensorLayout& logits = scenario.tensor_layouts.at(args_.input);
    params_.ignore_index = args_.ignore_index;
    params_.label_smoothing = args_.label_smoothing;
    params_.z_loss = args_.z_loss;
    params_.vocab = logits.shape.extent(args_.vocab_axis);
    faults_.local_max = scenario.has_fault(Fault::ce_local_max);
    faults_.target_every_rank = scenario.has_fault(Fault::ce_target_every_rank);
    faults_.ignored_counted = scenario.has_fault(Fault::ce_ignored_tokens_counted);
    faults_.padding_in_softmax = scenario.has_fault(Fault::vocab_padding_in_softmax);
  }

  void forward(StepEnv<T>& env) override {
    namespace parts = cross_entropy_parts;
    const std::string& output = args_.output;
    // The oracle's rows: a micro-batch's, or this process's under --oracle distributed, whose
    // sums continue the previous process's (chain_rows).
    const std::int64_t begin = env.rows ? env.rows->begin : env.micro.begin;
    T sum = T(0);
    std::int64_t count = 0;
    if (env.oracle) {
      const Tensor<T>& x = env.dense_at(args_.input);
      const Shape tokens = x.shape().without(args_.vocab_axis);
      dense_labels_ = frame_labels(labels_shape_, *ids_,
                                   dense_frame(x.shape(), labels_shape_, args_.batch_axis, begin));
      const VocabColumns all{0, params_.vocab};
      Tensor<T> max(tokens), sumexp(tokens), target(tokens), logit_sum(tokens), lse(tokens),
          loss(tokens);
      ce_row_max(x, all, false, max);
      ce_row_sumexp(x, all, false, max, sumexp);
      ce_row_target(x, all, dense_labels_, params_, false, target);
      if (params_.label_smoothing > 0) ce_row_sum(x, all, logit_sum);
      ce_token_loss(max, sumexp, target, logit_sum, dense_labels_, params_, lse, loss);
      Tensor<T> carried(Shape(), {sum});
      env.chain_rows({&carried}, &count, [&] {
        ce_sum_tokens(loss, dense_labels_, params_, false, carried[0], count);
      });
      sum = carried[0];
      env.dense[part_name(output, parts::max)] = std::move(max);
      env.dense[part_name(output, parts::sumexp)] = std::move(sumexp);
      env.dense[part_name(output, parts::target_logit)] = std::move(target);
      if (params_.label_smoothing > 0) {
        env.dense[part_name(output, parts::logit_sum)] = std::move(logit_sum);
      }
      env.dense[part_name(output, parts::lse)] = std::move(lse);
    } else {
      for (std::string_view part : {parts::max, parts::sumexp, parts::target_logit, parts::lse}) {
        env.dense[part_name(output, part)] = Tensor<T>();
      }
      if (params_.label_smoothing > 0) env.dense[part_name(output, parts::logit_sum)] = Tensor<T>();
    }
    env.set_dense(part_name(output, parts::sum), [&] { return Tensor<T>(Shape(), {sum}); });
    env.set_dense(part_name(output, parts::valid_tokens),
                  [&] { return Tensor<T>(Shape(), {T(count)}); });
    dense_count_ = T(count);
    CrossEntropyMicro micro;
    if (env.micro.index > 0) {
      micro = {env.micro.index, env.micro.begin, env.micro.rows};
      if (env.oracle) {
        dense_count_ = env.micro.whole_oracle->at(part_name(output, parts::valid_tokens))[0];
      }
      env.set_dense(part_name(output, parts::step_valid_tokens),
                    [&] { return Tensor<T>(Shape(), {dense_count_}); });
    }
    env.set_dense(output, [&] { return Tensor<T>(Shape(), {T(sum / dense_count_)}); });

    env.sharded[output] = cross_entropy_sharded(
        env.world, env.sharded_at(args_.input), labels_shape_, *ids_, args_.vocab_axis,
        args_.batch_axis, params_, faults_, output, micro, saved_);
  }

  void backward(StepEnv<T>& env) override {
    namespace parts = cross_entropy_parts;
    const std::string& input = args_.input;
    const std::string& output = args_.output;
    Tensor<T> dx;  // stays the empty placeholder on a process without the oracle
    if (env.oracle) {
      ce_backward(env.dense_at(input), VocabColumns{0, params_.vocab}, dense_labels_,
                  env.dense_at(part_name(output, parts::max)),
                  env.dense_at(part_name(output, parts::sumexp)),
                  env.dense_at(part_name(output, parts::lse)), params_, false, dense_count_, dx);
    }
    DistTensor<T> sdx = cross_entropy_backward_sharded(env.world, env.sharded_at(input), params_,
                                                       faults_, saved_, grad_name(input));
    const bool exact = vocab_dim(sdx.layout, args_.vocab_axis) < 0;
    env.add_grad(input, std::move(dx), std::move(sdx),
                 {.op = backward_label(OpKind::cross_entropy),
                  .exact = exact,
                  .inputs = {input, part_name(output, parts::lse)}});
  }

  // The logits are kept for the backward, with the per-token max, sumexp and lse.
  std::vector<std::int64_t> saved_bytes(const StepEnv<T>& env) const override {
    std::vector<std::int64_t> bytes =
        local_bytes(env.sharded.at(args_.input), env.activation_bytes());
    for (const DistTensor<T>* part : {&saved_.max, &saved_.sumexp, &saved_.lse}) {
      const std::vector<std::int64_t> more = local_bytes(*part, env.part_bytes());
      for (std::size_t r = 0; r < bytes.size(); ++r) bytes[r] += more[r];
    }
    return bytes;
  }

 private:
  const CrossEntropyArgs& args_;
  Shape labels_shape_;
  std::shared_ptr<const std::vector<std::int64_t>> ids_;
  CrossEntropyParams params_;
  CrossEntropyFaults faults_;
  std::vector<std::int64_t> dense_labels_;  // the oracle's tokens' labels, in its flat order
  T dense_count_ = T(0);                    // what the oracle divides by: the step's count
  CrossEntropySaved<T> saved_;
};

// --oracle distributed (runner/oracle_rows.hpp): the loss sums over the batch axis' rows.
inline void check_oracle_rows(const CrossEntropyArgs& args, OracleRowsUse& use) {
  use.sums_rows(args.batch_axis);
}

}  // namespace shardsim
