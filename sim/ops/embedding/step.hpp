// Binds an embedding scenario step to the dense oracle (every token looks up its row) and the
// vocab-parallel sharded plan. The ids are an i64 tensor of the scenario, read by global token
// index on both sides; with micro-batches the output holds the micro-batch's rows.
#pragma once

#include "ops/embedding/embedding.hpp"
#include "ops/embedding/embedding_plan.hpp"
#include "runner/steps/step_env.hpp"

namespace shardsim {

template <typename T>
class EmbeddingStep final : public StepOp<T> {
 public:
  EmbeddingStep(const StepSpec& step, const Scenario& scenario)
      : args_(step.as<EmbeddingArgs>()) {
    const TensorSpec* ids = scenario.find_ids(args_.input);
    SHARDSIM_ASSERT(ids != nullptr, "embedding: the loader checked the ids");
    ids_shape_ = ids->shape;
    ids_layout_ = ids->layout;
    ids_ = ids->ids;
    unreduced_ = scenario.has_fault(Fault::embedding_partial_not_reduced);
  }

  void forward(StepEnv<T>& env) override {
    const std::string& output = args_.output;
    // The oracle's rows of the batch axis: a micro-batch's, or this process's under --oracle
    // distributed; the whole batch otherwise.
    std::int64_t begin = 0;
    std::int64_t rows = 0;  // 0: every row
    if (env.rows && ids_shape_.has(env.rows->axis)) {
      begin = env.rows->begin;
      rows = env.rows->end - env.rows->begin;
    } else if (env.micro.index > 0) {
      begin = env.micro.begin;
      rows = env.micro.rows[static_cast<std::size_t>(env.micro.index - 1)];
    }
    env.set_dense(output, [&] {
      const Tensor<T>& w = env.dense_at(args_.weight);
      std::vector<Axis> axes = ids_shape_.axes();
      for (Axis& a : axes) {
        if (rows > 0 && a.name == args_.batch_axis) a.extent = rows;
      }
      axes.push_back(w.shape()[1]);
      Tensor<T> y{Shape(std::move(axes))};
      dense_ids_ = frame_labels(ids_shape_, *ids_,
                                dense_frame(y.shape(), ids_shape_, args_.batch_axis, begin));
      embedding_forward(dense_ids_, w, VocabRows{0, w.shape()[0].extent}, y);
      return y;
    });
    const std::int64_t micro_begin = env.micro.index > 0 ? env.micro.begin : 0;
    const std::int64_t micro_rows =
        env.micro.index > 0 ? env.micro.rows[static_cast<std::size_t>(env.micro.index - 1)] : 0;
    env.sharded[output] = embedding_sharded(
        env.world, ids_shape_, *ids_, ids_layout_, env.sharded_at(args_.weight), args_.to,
        args_.batch_axis, micro_begin, micro_rows, unreduced_, output, saved_);
  }

  void backward(StepEnv<T>& env) override {
    const std::string& output = args_.output;
    if (!env.has_grad(output)) return;
    Tensor<T> dw;  // stays the empty placeholder on a process without the oracle
    if (env.oracle) {
      const Tensor<T>& w = env.dense_at(args_.weight);
      dw = Tensor<T>(w.shape());
      embedding_backward(dense_ids_, env.dense_at(grad_name(output)),
                         VocabRows{0, w.shape()[0].extent}, dw);
    }
    bool exact = true;
    DistTensor<T> sdw =
        embedding_backward_sharded(env.world, env.sharded_at(grad_name(output)),
                                   env.sharded_at(args_.weight), saved_, grad_name(args_.weight),
                                   exact);
    env.add_grad(args_.weight, std::move(dw), std::move(sdw),
                 {.op = backward_label(OpKind::embedding),
                  .exact = exact,
                  .inputs = {grad_name(output)}});
  }

  // Backward reads the ids and grad(output) only.
  bool backward_reads_output() const override { return false; }

 private:
  const EmbeddingArgs& args_;
  Shape ids_shape_;
  Layout ids_layout_;
  std::shared_ptr<const std::vector<std::int64_t>> ids_;
  bool unreduced_ = false;
  std::vector<std::int64_t> dense_ids_;  // the oracle's tokens' ids, in its flat order
  EmbeddingSaved saved_;
};

// --oracle distributed (runner/oracle_rows.hpp): the lookup is row by row; in training the
// weight's gradient scatter-adds every row's tokens in one order, which row blocks would change.
inline void check_oracle_rows(const EmbeddingArgs&, OracleRowsUse& use) {
  use.refuse_in_training(
      "embedding's weight gradient scatter-adds the tokens of every row in token order");
}

}  // namespace shardsim
