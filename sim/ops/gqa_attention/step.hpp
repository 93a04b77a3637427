// Binds a gqa_attention scenario step to the dense oracle (ops/gqa_attention/gqa.hpp on the
// whole tensors) and the tensor-parallel plan (gqa_plan.hpp).
#pragma once

#include "ops/gqa_attention/gqa.hpp"
#include "ops/gqa_attention/gqa_cp_plan.hpp"
#include "ops/gqa_attention/gqa_plan.hpp"
#include "runner/steps/step_env.hpp"

namespace shardsim {

template <typename T>
class GqaAttentionStep final : public StepOp<T> {
 public:
  GqaAttentionStep(const StepSpec& step, const Scenario& scenario)
      : args_(step.as<GqaAttentionArgs>()) {
    params_.n_head = args_.n_head;
    params_.n_kv_head = args_.n_kv_head;
    params_.rope = args_.rope != "none";
    params_.rope_params.theta = args_.rope_theta;
    if (params_.rope) params_.rope_params.convention = parse_rope_convention(args_.rope);
    sharded_params_ = params_;
    // The fault reads another kv head than the rank's own only where every kv head is held
    // (wk Replicate on the step's dim); elsewhere it changes nothing, as the loader says.
    const TensorSpec* wk = scenario.find_tensor(args_.wk);
    sharded_params_.wrong_group = scenario.has_fault(Fault::gqa_wrong_group) && wk != nullptr &&
                                  wk->layout.on(step.mesh_dim).is_replicate();
    kv_grad_unreduced_ = scenario.has_fault(Fault::gqa_kv_grad_unreduced);
    const std::string mode = args_.cp_mode.value_or("allgather");
    cp_mode_ = mode == "ring"      ? GqaCpMode::ring
               : mode == "ulysses" ? GqaCpMode::ulysses
                                   : GqaCpMode::allgather;
  }

  void forward(StepEnv<T>& env) override {
    const std::string& out = args_.output;
    if (env.oracle) {
      gqa_forward(env.dense_at(args_.input), env.dense_at(args_.wq), env.dense_at(args_.wk),
                  env.dense_at(args_.wv), env.dense_at(args_.wo), params_, dense_);
    }
    for (const auto& [part, member] :
         {std::pair{"q", &GqaActivations<T>::q}, std::pair{"k", &GqaActivations<T>::k},
          std::pair{"v", &GqaActivations<T>::v}, std::pair{"q_rot", &GqaActivations<T>::q_rot},
          std::pair{"k_rot", &GqaActivations<T>::k_rot},
          std::pair{"attn", &GqaActivations<T>::attn}}) {
      env.set_dense(part_name(out, part), [&] { return dense_.*member; });
    }
    env.set_dense(out, [&] { return dense_.y; });
    // Context parallelism where the input is Shard(seq) on a dim (the loader allows one).
    cp_dim_ = gqa_cp::sequence_dim(env.sharded_at(args_.input));
    if (cp_dim_ >= 0) {
      env.sharded[out] = gqa_cp_sharded(env.world, cp_dim_, cp_mode_, env.sharded_at(args_.input),
                                        env.sharded_at(args_.wq), env.sharded_at(args_.wk),
                                        env.sharded_at(args_.wv), env.sharded_at(args_.wo),
                                        sharded_params_, out, cp_saved_);
      return;
    }
    env.sharded[out] = gqa_sharded(env.world, env.sharded_at(args_.input), env.sharded_at(args_.wq),
                                   env.sharded_at(args_.wk), env.sharded_at(args_.wv),
                                   env.sharded_at(args_.wo), sharded_params_, out, saved_);
  }

  void backward(StepEnv<T>& env) override {
    const std::string& out = args_.output;
    if (!env.has_grad(out)) return;
    Tensor<T> dwq, dwk, dwv, dwo;
    GqaGrads<T> grads;
    if (env.oracle) {
      dwq = Tensor<T>(env.dense_at(args_.wq).shape());
      dwk = Tensor<T>(env.dense_at(args_.wk).shape());
      dwv = Tensor<T>(env.dense_at(args_.wv).shape());
      dwo = Tensor<T>(env.dense_at(args_.wo).shape());
      gqa_backward(env.dense_at(grad_name(out)), env.dense_at(args_.input), env.dense_at(args_.wq),
                   env.dense_at(args_.wk), env.dense_at(args_.wv), env.dense_at(args_.wo), dense_,
                   params_, grads, dwq, dwk, dwv, dwo);
    }
    GqaShardedGrads<T> g =
        cp_dim_ >= 0
            ? cp_backward(env, grads)
            : gqa_backward_sharded(
                  env.world, env.sharded_at(grad_name(out)), env.sharded_at(args_.input),
                  env.sharded_at(args_.wq), env.sharded_at(args_.wk), env.sharded_at(args_.wv),
                  env.sharded_at(args_.wo), sharded_params_, saved_, kv_grad_unreduced_);
    const std::vector<std::string> inputs{grad_name(out), part_name(out, "attn")};
    const auto label = [&](const DistTensor<T>& t) {
      return BoundaryLabel{.op = backward_label(OpKind::gqa_attention),
                           .exact = !t.layout.has_partial() && !g.heads,
                           .inputs = inputs};
    };
    env.add_grad(args_.wo, std::move(dwo), g.dwo, label(g.dwo));
    env.add_grad(args_.wq, std::move(dwq), g.dwq, label(g.dwq));
    env.add_grad(args_.wk, std::move(dwk), g.dwk, label(g.dwk));
    env.add_grad(args_.wv, std::move(dwv), g.dwv, label(g.dwv));
    env.add_grad(args_.input, std::move(grads.x), g.dx, label(g.dx));
  }

  // The context-parallel backward, after the oracle's (whose grads it compares with).
  GqaShardedGrads<T> cp_backward(StepEnv<T>& env, GqaGrads<T>& grads) {
    const std::string& out = args_.output;
    for (const auto& [part, member] :
         {std::pair{"attn", &GqaGrads<T>::attn}, std::pair{"q_rot", &GqaGrads<T>::q_rot},
          std::pair{"k_rot", &GqaGrads<T>::k_rot}, std::pair{"v", &GqaGrads<T>::v}}) {
      env.set_dense(grad_name(part_name(out, part)), [&] { return grads.*member; });
    }
    return gqa_cp_backward(env.world, cp_dim_, cp_mode_, env.sharded_at(grad_name(out)),
                           env.sharded_at(args_.input), env.sharded_at(args_.wq),
                           env.sharded_at(args_.wk), env.sharded_at(args_.wv),
                           env.sharded_at(args_.wo), out, cp_saved_, kv_grad_unreduced_);
  }

  // Backward reads the saved activations, not the output.
  bool backward_reads_output() const override { return false; }

 private:
  const GqaAttentionArgs& args_;
  GqaParams params_;          // the oracle's
  GqaParams sharded_params_;  // the ranks' (with the wrong-group fault)
  bool kv_grad_unreduced_ = false;
  GqaActivations<T> dense_;
  GqaSaved<T> saved_;
  GqaCpMode cp_mode_ = GqaCpMode::allgather;
  int cp_dim_ = -1;  // the mesh dim the input is Shard(seq) on in this forward, or -1
  GqaCpSaved<T> cp_saved_;
};

// --oracle distributed (runner/oracle_rows.hpp): the weights' gradients sum over every row.
inline void check_oracle_rows(const GqaAttentionArgs&, OracleRowsUse& use) {
  use.refuse_in_training("gqa_attention's weight gradients sum the tokens of every row");
}

}  // namespace shardsim
