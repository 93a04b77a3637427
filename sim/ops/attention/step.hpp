// Binds a sliding_window_attention scenario step: the dense streaming oracle
// (ops/attention/stream.hpp) and the context-parallel plan (ops/attention/plan.hpp), side by
// side. The step object carries the KV cache across streamed chunks, dense and per rank, and
// resets both at the start of every training step (begin_stream).
#pragma once

#include "ops/attention/plan.hpp"
#include "ops/attention/sharded_plan.hpp"
#include "ops/attention/stream.hpp"
#include "runner/steps/step_env.hpp"

namespace shardsim {

template <typename T>
class SlidingWindowAttentionStep final : public StepOp<T> {
 public:
  SlidingWindowAttentionStep(const StepSpec& step, const Scenario& scenario)
      : args_(step.as<SlidingWindowAttentionArgs>()) {
    config_.name = args_.output;
    if (args_.window) config_.params.attention.window = *args_.window;
    config_.params.rope.theta = args_.rope_theta;
    config_.params.rope.convention = parse_rope_convention(args_.rope);
    config_.mode = parse_cp_mode(args_.cp_mode);
    config_.faults.cache_raw_k = scenario.has_fault(Fault::cache_raw_k);
    config_.faults.ring_merge_no_max = scenario.has_fault(Fault::ring_merge_no_max);
    config_.faults.ring_merge_average = scenario.has_fault(Fault::ring_merge_average);
    config_.faults.ring_backward_local_lse = scenario.has_fault(Fault::ring_backward_local_lse);
    config_.faults.mask_local_query_positions =
        scenario.has_fault(Fault::mask_local_query_positions);
    config_.faults.mask_zigzag_contiguous = scenario.has_fault(Fault::mask_zigzag_contiguous);
    config_.faults.rope_local_positions = scenario.has_fault(Fault::rope_local_positions);
    config_.faults.window_off_by_one = scenario.has_fault(Fault::window_off_by_one);
    config_.faults.rope_after_gather_wrong_offset =
        scenario.has_fault(Fault::rope_after_gather_wrong_offset);
  }

  void begin_stream() override {
    dense_cache_.reset();
    sharded_cache_.reset();
    sharded_queries_cache_.reset();
  }

  void forward(StepEnv<T>& env) override {
    if (env.oracle) {
      dense_forward(env);
    } else {
      env.dense[config_.name] = Tensor<T>();  // the placeholder (step_env.hpp)
    }
    const DistTensor<T>& x = env.sharded_at(args_.input);
    // Queries sharded on the cp dim (the loader allows it without [stream]).
    sharded_queries_ = env.world.placement(x).is_shard();
    if (sharded_queries_) {
      env.sharded[config_.name] = cp_sharded_attention_forward(
          env.world, x, env.sharded_at(args_.wq), env.sharded_at(args_.wk),
          env.sharded_at(args_.wv), env.sharded_at(args_.wo), config_, sharded_queries_cache_,
          sharded_saved_);
      return;
    }
    env.sharded[config_.name] = cp_attention_forward(
        env.world, x, env.sharded_at(args_.wq), env.sharded_at(args_.wk), env.sharded_at(args_.wv),
        env.sharded_at(args_.wo), config_, sharded_cache_, saved_);
  }

  // The dense streaming oracle's forward and its recorded parts.
  void dense_forward(StepEnv<T>& env) {
    const std::string& output = config_.name;
    stream_attention_forward(env.dense_at(args_.input), env.dense_at(args_.wq),
                             env.dense_at(args_.wk), env.dense_at(args_.wv), env.dense_at(args_.wo),
                             config_.params, dense_cache_, acts_);
    // A forward-only run (env.after_step set) has no backward to keep the activations for: they
    // move into the recorded parts instead of being copied (a copy is fresh memory the size of
    // the activations). The slices of k_all and v_all below are taken before those move.
    const bool keep = env.after_step == nullptr;
    auto store = [&](AttentionPart part, Tensor<T>& value) {
      env.dense[config_.part(part)] = keep ? value : std::move(value);
    };
    store(AttentionPart::q, acts_.q);
    store(AttentionPart::k, acts_.k);
    store(AttentionPart::v, acts_.v);
    store(AttentionPart::q_rot, acts_.q_rot);
    if (acts_.cache_length > 0) {
      store(AttentionPart::cache_k, acts_.cache_k);
      store(AttentionPart::cache_v, acts_.cache_v);
    }
    store(AttentionPart::k_cat, acts_.k_cat);
    if (acts_.cache_length > 0) {
      const std::int64_t length = acts_.k_all.shape().extent("kv") - acts_.cache_length;
      env.dense[config_.part(AttentionPart::k_new)] =
          slice_along(acts_.k_all, "kv", acts_.cache_length, length);
      env.dense[config_.part(AttentionPart::v_new)] =
          slice_along(acts_.v_all, "kv", acts_.cache_length, length);
    }
    store(AttentionPart::k_all, acts_.k_all);
    store(AttentionPart::v_all, acts_.v_all);
    store(AttentionPart::lse, acts_.core.lse);
    store(AttentionPart::attn, acts_.attn);
    env.dense[output] = keep ? acts_.y : std::move(acts_.y);
  }

  void backward(StepEnv<T>& env) override {
    const std::string& output = config_.name;
    if (!env.has_grad(output)) return;
    const std::string& input = args_.input;
    const std::string names[4] = {args_.wq, args_.wk, args_.wv, args_.wo};

    // Dense oracle (empty placeholders on a process without it).
    Tensor<T> dw[4];
    StreamAttentionGrads<T> g;
    if (env.oracle) dense_backward(env, dw, g);

    // Sharded plan.
    CpAttentionGrads<T> sg;
    if (sharded_queries_) {
      const DistTensor<T>& x = env.sharded_at(input);
      const DistTensor<T> dy = align_grad(env.world, env.sharded_at(grad_name(output)), x.layout);
      sg = cp_sharded_attention_backward(env.world, dy, x, env.sharded_at(names[0]),
                                         env.sharded_at(names[1]), env.sharded_at(names[2]),
                                         env.sharded_at(names[3]), config_, sharded_saved_);
    } else {
      sg = cp_attention_backward(env.world, env.sharded_at(grad_name(output)),
                                 env.sharded_at(input), env.sharded_at(names[0]),
                                 env.sharded_at(names[1]), env.sharded_at(names[2]),
                                 env.sharded_at(names[3]), config_, saved_);
    }
    add_grads(env, dw, g, sg);
  }

  // The dense streaming oracle's backward: the weights' gradients and the recorded parts.
  void dense_backward(StepEnv<T>& env, Tensor<T> (&dw)[4], StreamAttentionGrads<T>& g) {
    const std::string& output = config_.name;
    const std::string& input = args_.input;
    const std::string names[4] = {args_.wq, args_.wk, args_.wv, args_.wo};
    for (int i = 0; i < 4; ++i) dw[i] = Tensor<T>(env.dense_at(names[i]).shape());
    stream_attention_backward(env.dense_at(grad_name(output)), env.dense_at(input),
                              env.dense_at(names[0]), env.dense_at(names[1]),
                              env.dense_at(names[2]), env.dense_at(names[3]), acts_, config_.params,
                              g, dw[0], dw[1], dw[2], dw[3]);
    auto store = [&](AttentionPart part, Tensor<T> value) {
      env.dense[config_.part_grad(part)] = std::move(value);
    };
    store(AttentionPart::attn, g.attn);
    store(AttentionPart::q_rot, g.q_rot);
    store(AttentionPart::k_all, g.k_all);
    store(AttentionPart::v_all, g.v_all);
    if (acts_.cache_length > 0) {
      const std::int64_t length = acts_.q.shape().extent("seq");
      store(AttentionPart::k_new, slice_along(g.k_all, "kv", acts_.cache_length, length));
      store(AttentionPart::v_new, slice_along(g.v_all, "kv", acts_.cache_length, length));
    }
    store(AttentionPart::q, g.q);
    store(AttentionPart::k_cat, g.k_cat);
    store(AttentionPart::k, g.k);
    store(AttentionPart::v, g.v);
  }

  void add_grads(StepEnv<T>& env, Tensor<T> (&dw)[4], StreamAttentionGrads<T>& g,
                 CpAttentionGrads<T>& sg) {
    const std::string& output = config_.name;
    const std::string& input = args_.input;
    const std::string names[4] = {args_.wq, args_.wk, args_.wv, args_.wo};
    // Replicate gradients, computed on every rank by the dense arithmetic from the recorded
    // activation gradients: exact exactly while those match the oracle bitwise.
    const std::string dq = config_.part_grad(AttentionPart::q);
    const std::string dk = config_.part_grad(AttentionPart::k);
    const std::string dv = config_.part_grad(AttentionPart::v);
    const std::string op = backward_label(OpKind::sliding_window_attention);
    // Partial on another mesh dim (e.g. the batch sharded on dp): each member sums its own rows,
    // a regrouped sum of the oracle's terms, so no exactness claim.
    const bool weights_exact = !sg.wq.layout.has_partial();
    env.add_grad(names[0], std::move(dw[0]), std::move(sg.wq),
                 {.op = op, .exact = weights_exact, .inputs = {dq, input}});
    env.add_grad(names[1], std::move(dw[1]), std::move(sg.wk),
                 {.op = op, .exact = weights_exact, .inputs = {dk, input}});
    env.add_grad(names[2], std::move(dw[2]), std::move(sg.wv),
                 {.op = op, .exact = weights_exact, .inputs = {dv, input}});
    env.add_grad(names[3], std::move(dw[3]), std::move(sg.wo),
                 {.op = op,
                  .exact = weights_exact,
                  .inputs = {grad_name(output), config_.part(AttentionPart::attn)}});
    env.add_grad(input, std::move(g.x), std::move(sg.x),
                 {.op = op, .exact = true, .inputs = {dq, dk, dv, names[0], names[1], names[2]}});
  }

  // What each rank keeps from forward for backward: x, the attention output, and the mode's
  // queries, keys, values and softmax statistics (ring: the merged output and lse).
  std::vector<std::int64_t> saved_bytes(const StepEnv<T>& env) const override {
    const std::int64_t width = env.activation_bytes();
    std::vector<std::int64_t> bytes = local_bytes(env.sharded.at(args_.input), width);
    auto add = [&](const DistTensor<T>& tensor) {
      if (tensor.locals.empty()) return;
      const std::vector<std::int64_t> more = local_bytes(tensor, width);
      for (std::size_t r = 0; r < bytes.size(); ++r) bytes[r] += more[r];
    };
    if (sharded_queries_) {
      const CpShardedSaved<T>& s = sharded_saved_;
      for (const DistTensor<T>* t : {&s.q_rot, &s.attn, &s.lse}) add(*t);
      switch (config_.mode) {
        case CpMode::allgather:
          for (const DistTensor<T>* t : {&s.k_all, &s.v_all}) add(*t);
          break;
        case CpMode::ring:  // the KV blocks: its cache ++ its own keys and values
          for (std::size_t r = 0; r < s.k_blocks.size() && r < bytes.size(); ++r) {
            bytes[r] += width * (s.k_blocks[r].numel() + s.v_blocks[r].numel());
          }
          break;
        case CpMode::ulysses:  // the queries and the head group's KV axis
          add(s.q_heads);
          for (std::size_t r = 0; r < s.core.size() && r < bytes.size(); ++r) {
            bytes[r] += width * (s.k_group[r].numel() + s.v_group[r].numel() +
                                 s.core[r].max.numel() + s.core[r].sum.numel());
          }
          break;
      }
      return bytes;
    }
    add(saved_.attn);
    switch (config_.mode) {
      case CpMode::allgather:
        for (const DistTensor<T>* t : {&saved_.q_rot, &saved_.k_all, &saved_.v_all}) add(*t);
        break;
      case CpMode::ring:
        for (const DistTensor<T>* t :
             {&saved_.q_part, &saved_.k_shard, &saved_.v_shard, &saved_.attn_part, &saved_.lse}) {
          add(*t);
        }
        break;
      case CpMode::ulysses:
        for (const DistTensor<T>* t : {&saved_.q_part, &saved_.k_heads, &saved_.v_heads}) add(*t);
        break;
    }
    for (std::size_t r = 0; r < saved_.core.size() && r < bytes.size(); ++r) {
      const AttentionSaved<T>& core = saved_.core[r];
      bytes[r] += env.part_bytes() * (core.max.numel() + core.sum.numel() + core.lse.numel());
    }
    return bytes;
  }

 private:
  const SlidingWindowAttentionArgs& args_;
  CpAttentionConfig config_;
  KvCache<T> dense_cache_;
  StreamAttentionActivations<T> acts_;
  CpKvCache<T> sharded_cache_;
  CpAttentionSaved<T> saved_;
  bool sharded_queries_ = false;  // the input is Shard(seq) on the cp dim (sharded_plan.hpp)
  CpShardedCache<T> sharded_queries_cache_;
  CpShardedSaved<T> sharded_saved_;
};

// --oracle distributed (runner/oracle_rows.hpp): each row from that row alone in a forward pass.
inline void check_oracle_rows(const SlidingWindowAttentionArgs&, OracleRowsUse& use) {
  use.refuse_in_training(
      "attention's weight gradients total every (batch, position) before they are added, "
      "which row blocks would reorder");
}

}  // namespace shardsim
