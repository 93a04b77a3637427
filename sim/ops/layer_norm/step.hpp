// Binds a layer_norm scenario step to the dense oracle and the sharded plans:
//   input whole rows (Replicate, Shard(other axis))  -> layer_norm_row_sharded (exact)
//   input Shard(axis)                                -> layer_norm_hidden_sharded, `stats` mode
// LayerNorm faults (layer_norm_faults.hpp) reach the sharded plans only.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ops/layer_norm/layer_norm.hpp"
#include "ops/layer_norm/layer_norm_hidden_plan.hpp"
#include "ops/layer_norm/layer_norm_plan.hpp"
#include "runner/steps/step_env.hpp"

namespace shardsim {

template <typename T>
class LayerNormStep final : public StepOp<T> {
 public:
  LayerNormStep(const StepSpec& step, const Scenario& scenario) : args_(step.as<LayerNormArgs>()) {
    params_.axis = args_.axis;
    params_.eps = args_.eps;
    if (args_.stats) stats_ = parse_hidden_stats(*args_.stats);
    token_axis_ = args_.token_axis;
    faults_.combine_token_means = scenario.has_fault(Fault::combine_token_means);
    faults_.rmsnorm_substituted = scenario.has_fault(Fault::rmsnorm_substituted);
    faults_.hidden_shard_local_stats = scenario.has_fault(Fault::hidden_shard_local_stats);
    faults_.unbiased_variance = scenario.has_fault(Fault::unbiased_variance);
    faults_.eps_mismatch = scenario.has_fault(Fault::eps_mismatch);
    faults_.dtype_mismatch = scenario.has_fault(Fault::dtype_mismatch);
  }

  void forward(StepEnv<T>& env) override {
    const std::string& input = args_.input;
    const std::string& output = args_.output;
    // A bf16/f16 run: the kernels store y and dx rounded, the oracle's and every rank's, and the
    // boundaries that record them say so (BoundaryLabel::stored).
    params_.store = env.storage;
    {
      const DistTensor<T>& sx = env.sharded_at(input);
      hidden_ = env.world.placement(sx).is_shard() && env.world.placement(sx).axis == params_.axis;
    }
    // Whole rows: a spent x (no later step reads it) is normalized in its own storage, by the
    // oracle and by every rank, so that no copy of x is held beside y (Activation memory). The
    // hidden-sharded plans read the oracle's x after the oracle has run.
    env.set_dense_from(input, output, !hidden_, [&](const Tensor<T>& x, Tensor<T>& y) {
      layer_norm_forward(x, env.dense_opt(args_.weight), env.dense_opt(args_.bias), params_, y,
                         dense_saved_);
    });
    env.set_dense(output + ".mean", [&] { return dense_saved_.mean; });
    env.set_dense(output + ".rstd", [&] { return dense_saved_.rstd; });

    if (!hidden_) {
      std::vector<Tensor<T>> x_values = env.take_spent_locals(input);
      env.sharded[output] =
          layer_norm_row_sharded(env.world, env.sharded_at(input), env.sharded_opt(args_.weight),
                                 env.sharded_opt(args_.bias), params_, output, row_saved_, faults_,
                                 "", std::move(x_values));
      return;
    }
    const Tensor<T>& x = env.dense_at(input);
    const DistTensor<T>& sx = env.sharded_at(input);
    if (stats_ == HiddenStats::sum_sumsq) {
      // The oracle's full-row sums (ascending), for the all-reduced partial sums.
      Tensor<T>& sum = env.dense[output + ".sum"];
      Tensor<T>& sumsq = env.dense[output + ".sumsq"];
      if (env.oracle) {
        layer_norm_partial_sums(x, params_, x.shape().extent(params_.axis), sum, sumsq);
      }
    }
    env.sharded[output] = layer_norm_hidden_sharded(env.world, sx, env.sharded_opt(args_.weight),
                                                    env.sharded_opt(args_.bias), params_, stats_,
                                                    token_axis_, faults_, output, hidden_saved_);
  }

  void backward(StepEnv<T>& env) override {
    const std::string& input = args_.input;
    const std::string& output = args_.output;
    if (!env.has_grad(output)) return;
    const std::string weight = args_.weight.value_or("");
    const std::string bias = args_.bias.value_or("");
    params_.store = backward_store(env);

    // Dense oracle (empty placeholders on a process without it).
    const Tensor<T>& dy = env.dense_at(grad_name(output));
    const Tensor<T>& x = env.dense_at(input);
    const Tensor<T>* w = env.dense_opt(args_.weight);
    Tensor<T> dx, dw, db;
    if (env.oracle) dense_backward(env, dx, dw, db);

    const DistTensor<T>* sdy = &env.sharded_at(grad_name(output));
    DistTensor<T> moved;  // dy laid out like x, when it is not already
    if (hidden_ && !(sdy->layout == env.sharded_at(input).layout)) {
      // The distributed backward works on dy laid out like x (e.g. a Partial dy is
      // reduce-scattered first).
      moved = env.world.redistribute(*sdy, env.sharded_at(input).layout,
                                     {.tensor = grad_name(output) + "@" + input,
                                      .dense = grad_name(output),
                                      .exact = !sdy->layout.has_partial(),
                                      .inputs = {grad_name(output)}});
      moved.name = grad_name(output);  // the plan's boundaries keep the oracle's names
      sdy = &moved;
    }
    const DistTensor<T>& sx = env.sharded_at(input);
    const DistTensor<T>* sw = env.sharded_opt(args_.weight);
    const DistTensor<T>* sb = env.sharded_opt(args_.bias);
    std::vector<std::string> inputs{input, grad_name(output)};
    if (sw) inputs.push_back(weight);
    LayerNormShardedGrads<T> grads;
    bool dx_exact = true;
    bool dbias_exact = false;
    std::vector<std::string> dx_inputs = inputs;
    if (!hidden_) {
      // Each rank's rows give dx exactly and a Partial share of dweight/dbias. A Partial dy
      // gives Partial addends of dx, whose sum is a reordered arithmetic: no claim then.
      dx_exact = !sdy->layout.has_partial();
      grads = layer_norm_row_sharded_backward(env.world, *sdy, sx, sw, sb, row_saved_, params_,
                                              grad_name(input), grad_name(weight), grad_name(bias));
    } else {
      const std::string dense_dx = grad_name(input) + "@" + output;
      if (stats_ == HiddenStats::redistribute) {
        env.dense[dense_dx] = dx;  // this step's contribution, for the moved-back boundary
        dx_inputs = {dense_dx};
      } else {
        Tensor<T>& sum_dnorm = env.dense[grad_name(output) + ".sum_dnorm"];
        Tensor<T>& sum_dnorm_norm = env.dense[grad_name(output) + ".sum_dnorm_norm"];
        if (env.oracle) {
          layer_norm_backward_sums(dy, x, w, dense_saved_, params_, x.shape().extent(params_.axis),
                                   sum_dnorm, sum_dnorm_norm);
        }
        dx_exact = false;  // built from all-reduced row sums
        // dbias: the row-order sum of dy over the rank's features, the dense order (not Partial).
        dbias_exact = !faults_.hidden_shard_local_stats;
      }
      grads = layer_norm_hidden_sharded_backward(
          env.world, *sdy, sx, sw, sb, params_, stats_, token_axis_, faults_, hidden_saved_,
          grad_name(input), grad_name(weight), grad_name(bias), dense_dx);
    }
    if (sw) {
      env.add_grad(weight, std::move(dw), std::move(grads.dweight),
                   {.op = backward_label(OpKind::layer_norm), .inputs = inputs});
    }
    if (args_.bias) {
      dbias_exact = dbias_exact && !grads.dbias.layout.has_partial();  // Partial: reordered sums
      env.add_grad(bias, std::move(db), std::move(grads.dbias),
                   {.op = backward_label(OpKind::layer_norm),
                    .exact = dbias_exact,
                    .inputs = {grad_name(output)}});
    }
    env.add_grad(input, std::move(dx), std::move(grads.dx),
                 {.op = backward_label(OpKind::layer_norm),
                  .exact = dx_exact,
                  .inputs = dx_inputs,
                  .stored = params_.store.has_value()});
  }

  // The format the backward's kernels round dx to as they store it (LayerNormParams::store).
  // The hidden-sharded redistribute mode records the ranks' dx first on its way back, as
  // "grad(IN)@OUT" against the oracle's dx, an internal part a narrow run keeps in f32
  // (stored_tensor_names): its kernels store dx unrounded, and grad(IN) rounds it when recorded.
  std::optional<NarrowFormat> backward_store(const StepEnv<T>& env) const {
    if (hidden_ && stats_ == HiddenStats::redistribute) return std::nullopt;
    return env.storage;
  }

  // The oracle's gradients of x, the weight and the bias (the last two empty when absent); dw
  // and db sum the rows in ascending order (chain_rows under --oracle distributed).
  void dense_backward(StepEnv<T>& env, Tensor<T>& dx, Tensor<T>& dw, Tensor<T>& db) const {
    const Tensor<T>* w = env.dense_opt(args_.weight);
    const Tensor<T>* b = env.dense_opt(args_.bias);
    if (w) dw = Tensor<T>(w->shape());
    if (b) db = Tensor<T>(b->shape());
    env.chain_rows({w ? &dw : nullptr, b ? &db : nullptr}, nullptr, [&] {
      layer_norm_backward(env.dense_at(grad_name(args_.output)), env.dense_at(args_.input), w,
                          dense_saved_, params_, dx, w ? &dw : nullptr, b ? &db : nullptr);
    });
  }

  // Backward works from x, the saved statistics and grad(OUT): OUT itself may be released first.
  bool backward_reads_output() const override { return false; }

  // Activation memory: the input, and on the row-sharded path the per-row mean and rstd.
  std::vector<std::int64_t> saved_bytes(const StepEnv<T>& env) const override {
    std::vector<std::int64_t> bytes =
        local_bytes(env.sharded.at(args_.input), env.activation_bytes());
    if (hidden_) return bytes;
    for (const DistTensor<T>* stats : {&row_saved_.mean, &row_saved_.rstd}) {
      const std::vector<std::int64_t> more = local_bytes(*stats, env.part_bytes());
      for (std::size_t r = 0; r < bytes.size(); ++r) bytes[r] += more[r];
    }
    return bytes;
  }

 private:
  const LayerNormArgs& args_;
  LayerNormParams params_;
  HiddenStats stats_ = HiddenStats::sum_sumsq;  // used only when the input is Shard(axis)
  std::string token_axis_;
  LayerNormFaults faults_;
  bool hidden_ = false;
  LayerNormSaved<T> dense_saved_;
  LayerNormShardedSaved<T> row_saved_;
  LayerNormHiddenSaved<T> hidden_saved_;
};

// --oracle distributed (runner/oracle_rows.hpp): the statistics reduce over the normalized axis.
inline void check_oracle_rows(const LayerNormArgs& args, OracleRowsUse& use) {
  use.reduces_over(args.axis, "norm");
}

}  // namespace shardsim
