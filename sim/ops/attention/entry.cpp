// sliding_window_attention: schema, rules and plan checks.
#include <cstdio>
#include <limits>

#include "scenario/op_entry.hpp"

namespace shardsim {

namespace {

// x [batch, seq, hidden] Replicate on the cp dim, or Shard(seq) (chunk, balanced or zigzag) in
// any cp_mode, streamed or not (sequence-sharded queries, ops/attention/sharded_plan.hpp); wq, wk,
// wv [hidden, head, head_dim] and wo [head, head_dim, hidden], Replicate; output like x.
void attention_rules(const SlidingWindowAttentionArgs& args, const StepSpec& step,
                     StepContext& ctx) {
  const TensorState& input = ctx.tensor(step, "input");
  const std::string& x_name = args.input;
  const std::vector<Axis>& axes = input.shape.axes();
  if (axes.size() != 3 || axes[0].name != "batch" || axes[1].name != "seq" ||
      axes[2].name != "hidden") {
    ctx.fail(step, "input",
             std::string(step.op()) + " needs input axes [batch, seq, hidden]; '" + x_name +
                 "' is " + input.shape.str());
  }
  const Placement& x_on = input.placement(step);
  const bool sharded_queries = x_on.is_shard() && x_on.axis == "seq";
  if (!x_on.is_replicate() && !sharded_queries) {
    ctx.fail(
        step, "input",
        quote(x_name) + " must be Replicate or Shard(seq) over the cp group, not " + x_on.str());
  }
  if (sharded_queries && x_on.split == SplitPolicy::padded) {
    ctx.fail(step, "input",
             "sequence-sharded queries (" + quote(x_name) + " is " + x_on.str() +
                 ") need a chunk, balanced or zigzag split: padded rows would be queries and "
                 "keys at positions past the sequence");
  }
  ctx.require_passive(step, "input", input, {"seq", "hidden"});
  if (args.head_dim % 2 != 0) {
    ctx.fail(step, "head_dim",
             "RoPE rotates pairs: head_dim must be even, got " + std::to_string(args.head_dim));
  }
  const std::int64_t hidden = input.shape.extent("hidden");
  const Shape in_proj({{"hidden", hidden}, {"head", args.n_head}, {"head_dim", args.head_dim}});
  const Shape out_proj({{"head", args.n_head}, {"head_dim", args.head_dim}, {"hidden", hidden}});
  for (const std::string key : {"wq", "wk", "wv", "wo"}) {
    const TensorState& w = ctx.tensor(step, key);
    const Shape& want = key == "wo" ? out_proj : in_proj;
    if (!(w.shape == want)) {
      ctx.fail(step, key,
               "shape mismatch: " + quote(step.str(key)) + " is " + w.shape.str() + " but '" +
                   x_name + "' " + input.shape.str() +
                   " with n_head = " + std::to_string(args.n_head) +
                   ", head_dim = " + std::to_string(args.head_dim) + " needs " + want.str());
    }
    ctx.require_replicate_elsewhere(step, key, w);
    if (!w.placement(step).is_replicate()) {
      ctx.fail(step, key,
               quote(step.str(key)) + " must be Replicate, not " + w.placement(step).str());
    }
  }
  ctx.define(step, "output", {input.shape, input.layout});
}

// Needs the mesh and the faults: a fault that only one mode can express, and a warning for a
// valid but pointless plan.
void attention_plan_check(const SlidingWindowAttentionArgs& args, const StepSpec& step,
                          const Scenario& scenario) {
  const std::string path = "steps[" + std::to_string(step.index) + "]";
  auto loc_of = [&](const std::string& key) {
    return step.has(key) ? step.params.at(key).loc : step.loc;
  };
  if (scenario.has_fault(Fault::rope_after_gather_wrong_offset) && args.cp_mode != "allgather") {
    throw LocatedError(located(scenario.file, loc_of("cp_mode"), path + ".cp_mode",
                               "fault 'rope_after_gather_wrong_offset' rotates the gathered keys, "
                               "so it needs cp_mode = \"allgather\", not \"" +
                                   args.cp_mode + "\""));
  }
  for (Fault ring_only :
       {Fault::ring_merge_no_max, Fault::ring_merge_average, Fault::ring_backward_local_lse}) {
    if (scenario.has_fault(ring_only) && args.cp_mode != "ring") {
      throw LocatedError(located(scenario.file, loc_of("cp_mode"), path + ".cp_mode",
                                 "fault '" + std::string(fault_name(ring_only)) +
                                     "' changes the ring's merge, so it needs cp_mode = \"ring\", "
                                     "not \"" +
                                     args.cp_mode + "\""));
    }
  }
  const Placement& x_on = scenario.tensor_layouts.count(args.input)
                              ? scenario.tensor_layouts.at(args.input).layout.on(step.mesh_dim)
                              : Placement::replicate();
  if (scenario.has_fault(Fault::mask_local_query_positions) && !x_on.is_shard()) {
    throw LocatedError(located(scenario.file, loc_of("input"), path + ".input",
                               "fault 'mask_local_query_positions' needs sequence-sharded "
                               "queries: the input Shard(seq) on the cp dim"));
  }
  if (scenario.has_fault(Fault::mask_zigzag_contiguous) &&
      !(x_on.is_shard() && x_on.split == SplitPolicy::zigzag)) {
    throw LocatedError(located(scenario.file, loc_of("input"), path + ".input",
                               "fault 'mask_zigzag_contiguous' needs zigzag-sharded queries: the "
                               "input Shard(seq, zigzag) on the cp dim, not " +
                                   x_on.str()));
  }
  for (Fault mask_fault : {Fault::mask_local_query_positions, Fault::mask_zigzag_contiguous}) {
    if (scenario.has_fault(mask_fault) && args.cp_mode == "ulysses") {
      throw LocatedError(located(scenario.file, loc_of("cp_mode"), path + ".cp_mode",
                                 "fault '" + std::string(fault_name(mask_fault)) +
                                     "' changes a rank's mask of its own queries; ulysses masks "
                                     "the whole sequence per head group, so it needs cp_mode = "
                                     "\"allgather\" or \"ring\""));
    }
  }
  for (Fault replicated_only :
       {Fault::rope_local_positions, Fault::rope_after_gather_wrong_offset}) {
    if (scenario.has_fault(replicated_only) && x_on.is_shard()) {
      throw LocatedError(located(scenario.file, loc_of("input"), path + ".input",
                                 "fault '" + std::string(fault_name(replicated_only)) +
                                     "' changes the plan of a Replicate input (KV shards of a "
                                     "gathered chunk, or its cache); the input is " +
                                     x_on.str()));
    }
  }
  if (scenario.has_fault(Fault::cache_raw_k) && x_on.is_shard() && args.cp_mode == "ulysses") {
    throw LocatedError(located(scenario.file, loc_of("cp_mode"), path + ".cp_mode",
                               "fault 'cache_raw_k' caches each owner's keys before RoPE; with "
                               "sequence-sharded queries ulysses caches the head groups' keys "
                               "after the all-to-all, so it needs cp_mode = \"allgather\" or "
                               "\"ring\""));
  }
  // About one key of a query's window per shard, or fewer.
  const std::int64_t cp_size = scenario.mesh.devices.dim(step.mesh_dim).size;
  if (cp_size > 1 && args.window && *args.window <= cp_size) {
    const std::int64_t window = *args.window;
    std::fprintf(stderr, "%s\n",
                 located(scenario.file, loc_of("window"), path + ".window",
                         "warning: window = " + std::to_string(window) +
                             " over cp_size = " + std::to_string(cp_size) + " ranks leaves about " +
                             std::to_string(window) + "/" + std::to_string(cp_size) +
                             " <= 1 key of a query's window per shard: valid, but unlikely to "
                             "pay for its communication")
                     .c_str());
  }
}

}  // namespace

template <>
OpEntry op_entry<OpKind::sliding_window_attention>() {
  using A = SlidingWindowAttentionArgs;
  return OpEntryBuilder<A>(
             OpKind::sliding_window_attention,
             "streamed sliding-window attention with RoPE and a carried KV cache, "
             "context-parallel: the KV axis (cache ++ chunk) is sharded over the ranks "
             "(torch.chunk)")
      .tensor("input", &A::input,
              "x, [batch, seq, hidden], Replicate on the cp dim, or Shard(seq) (chunk, balanced or "
              "zigzag: sequence-sharded queries)")
      .tensor("wq", &A::wq, "query projection, [hidden, head, head_dim]")
      .tensor("wk", &A::wk, "key projection, [hidden, head, head_dim]")
      .tensor("wv", &A::wv, "value projection, [hidden, head, head_dim]")
      .tensor("wo", &A::wo, "output projection, [head, head_dim, hidden]")
      .output("output", &A::output, "y = attn wo, [batch, seq, hidden], placed like x")
      .integer("n_head", &A::n_head, true, "number of heads", {.low = 1})
      .integer("head_dim", &A::head_dim, true, "per-head width (even)",
               {.low = 2, .note = "(RoPE rotates pairs)"})
      .integer("window", &A::window, false,
               "key j is visible to query i iff 0 <= pos(i) - pos(j) < window; omit for plain "
               "causal",
               {.low = 1, .note = "key (omit it for plain causal attention)"})
      .number("rope_theta", &A::rope_theta, false, "RoPE base theta (default 10000)",
              {.low = 0,
               .high = std::numeric_limits<float>::max(),
               .low_open = true,
               .note = "(the f32 range: f32 runs use float(rope_theta))"})
      .text("rope", &A::rope, "RoPE pairing (default rotate_half)", {"rotate_half", "interleaved"})
      .text("cp_mode", &A::cp_mode, "context-parallel plan (default allgather)",
            {"allgather", "ring", "ulysses"})
      .rules(attention_rules)
      .plan_check(attention_plan_check)
      .build();
}

}  // namespace shardsim
