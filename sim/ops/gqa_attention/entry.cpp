// gqa_attention: schema and shape/placement rules.
#include <limits>

#include "scenario/op_entry.hpp"

namespace shardsim {

namespace {

// The input's placements: Replicate or Shard(seq) on the step's dim, whole in hidden everywhere,
// seq split on at most one dim (the cp dim) and never padded, the heads not split on the cp dim,
// and cp_mode only with a cp dim.
void check_cp(const GqaAttentionArgs& args, const StepSpec& step, StepContext& ctx,
              const TensorState& x) {
  const Placement& own = x.placement(step);
  if (!own.is_replicate() && !(own.is_shard() && own.axis == "seq")) {
    ctx.fail(step, "input",
             quote(args.input) +
                 " must be Replicate on the step's dim (the heads split there) or "
                 "Shard(seq) (context parallelism), not " +
                 own.str());
  }
  ctx.require_passive(step, "input", x, {"hidden"});
  int cp_dim = -1;
  for (int d = 0; d < x.layout.ndim(); ++d) {
    const Placement& p = x.layout.on(d);
    if (!p.is_shard() || p.axis != "seq") continue;
    if (cp_dim >= 0) {
      ctx.fail(step, "input",
               quote(args.input) +
                   " splits seq on two mesh dims; gqa_attention's context "
                   "parallelism needs the tokens split on one (all-gather the "
                   "sequence-parallel dim first)");
    }
    if (p.split == SplitPolicy::padded) {
      ctx.fail(step, "input",
               quote(args.input) + " is " + p.str() +
                   ": context parallelism needs every "
                   "position a real token (chunk, balanced or zigzag)");
    }
    cp_dim = d;
  }
  if (cp_dim == step.mesh_dim && !ctx.tensor(step, "wq").placement(step).is_replicate()) {
    ctx.fail(step, "wq",
             "the heads split on the step's dim, where " + quote(args.input) +
                 " is Shard(seq): context parallelism runs on another dim than the heads' "
                 "(or make wq, wk, wv, wo Replicate here)");
  }
  if (cp_dim >= 0 && args.cp_mode == std::optional<std::string>("ulysses") && ctx.mesh) {
    const bool heads = !ctx.tensor(step, "wq").placement(step).is_replicate();
    const std::int64_t local =
        heads ? args.n_head / ctx.mesh->dim(step.mesh_dim).size : args.n_head;
    const int cp_size = ctx.mesh->dim(cp_dim).size;
    if (heads && cp_dim < step.mesh_dim) {
      ctx.fail(step, "cp_mode",
               "ulysses splits each rank's query heads over the cp dim '" +
                   ctx.mesh->dim(cp_dim).name + "': list the heads' dim '" +
                   ctx.mesh->dim(step.mesh_dim).name + "' before it in [mesh] dims");
    }
    if (local % cp_size != 0) {
      ctx.fail(step, "cp_mode",
               "ulysses gives each cp rank whole query heads: " + std::to_string(local) +
                   " per rank do not divide over the " + std::to_string(cp_size) + " cp ranks");
    }
  }
  if (cp_dim < 0 && args.cp_mode) {
    ctx.fail(step, "cp_mode",
             "cp_mode is set but " + quote(args.input) +
                 " is not Shard(seq) on any mesh dim; "
                 "context parallelism needs the tokens split");
  }
}

// x [batch, seq, hidden], Replicate or Shard(seq) on the step's dim, whole in hidden elsewhere,
// seq split on at most one dim (the cp dim, check_cp);
// wq [hidden, head, head_dim], wk and wv [hidden, kv_head, head_dim], wo [head, head_dim,
// hidden], Replicate on every other dim. On the step's dim (P ranks): all four Replicate, or wq
// and wo Shard(head) (P divides n_head) with wk and wv Shard(kv_head) (P divides n_kv_head) or
// Replicate (P a multiple of n_kv_head, or any P: every rank computes every kv head).
void gqa_rules(const GqaAttentionArgs& args, const StepSpec& step, StepContext& ctx) {
  const TensorState& x = ctx.tensor(step, "input");
  const std::vector<Axis>& axes = x.shape.axes();
  if (axes.size() != 3 || axes[0].name != "batch" || axes[1].name != "seq" ||
      axes[2].name != "hidden") {
    ctx.fail(step, "input",
             "gqa_attention needs input axes [batch, seq, hidden]; " + quote(args.input) + " is " +
                 x.shape.str());
  }
  check_cp(args, step, ctx, x);
  if (args.n_head % args.n_kv_head != 0) {
    ctx.fail(step, "n_kv_head",
             "n_kv_head must divide n_head: " + std::to_string(args.n_kv_head) + " kv heads for " +
                 std::to_string(args.n_head) + " query heads");
  }
  if (args.rope != "none" && args.head_dim % 2 != 0) {
    ctx.fail(step, "head_dim",
             "RoPE rotates pairs: head_dim must be even, got " + std::to_string(args.head_dim));
  }
  const std::int64_t hidden = x.shape.extent("hidden");
  const Axis h{"head", args.n_head};
  const Axis kv{"kv_head", args.n_kv_head};
  const Axis d{"head_dim", args.head_dim};
  const Axis c{"hidden", hidden};
  const std::vector<std::pair<std::string, Shape>> want{{"wq", Shape({c, h, d})},
                                                        {"wk", Shape({c, kv, d})},
                                                        {"wv", Shape({c, kv, d})},
                                                        {"wo", Shape({h, d, c})}};
  for (const auto& [key, shape] : want) {
    const TensorState& w = ctx.tensor(step, key);
    if (!(w.shape == shape)) {
      ctx.fail(step, key,
               quote(step.str(key)) + " is " + w.shape.str() + "; with n_head = " +
                   std::to_string(args.n_head) + ", n_kv_head = " + std::to_string(args.n_kv_head) +
                   ", head_dim = " + std::to_string(args.head_dim) + " and " + quote(args.input) +
                   " " + x.shape.str() + " it must be " + shape.str());
    }
    ctx.require_replicate_elsewhere(step, key, w);
  }
  const int members = ctx.mesh ? ctx.mesh->dim(step.mesh_dim).size : 1;
  const auto on = [&](const char* key) { return ctx.tensor(step, key).placement(step); };
  const auto check = [&](const char* key, const std::string& axis) {
    const Placement p = on(key);
    if (p.is_replicate()) return false;
    if (!p.is_shard() || p.axis != axis || p.split != SplitPolicy::chunk) {
      ctx.fail(step, key,
               quote(step.str(key)) + " must be Replicate or Shard(" + axis +
                   ") on the step's dim, "
                   "not " +
                   p.str());
    }
    return true;
  };
  const bool heads = check("wq", "head");

  if (check("wo", "head") != heads) {
    ctx.fail(step, "wo",
             "wq and wo split the query heads together: both Shard(head) or both Replicate");
  }
  const bool kv_sharded = check("wk", "kv_head");
  if (check("wv", "kv_head") != kv_sharded) {
    ctx.fail(step, "wv", "wk and wv are placed alike: both Shard(kv_head) or both Replicate");
  }
  if (heads && args.n_head % members != 0) {
    ctx.fail(step, "wq",
             "the " + std::to_string(members) + " ranks of the step's dim must divide n_head = " +
                 std::to_string(args.n_head) + " (equal head groups, as Megatron)");
  }
  if (kv_sharded && (!heads || args.n_kv_head % members != 0)) {
    ctx.fail(step, "wk",
             "Shard(kv_head) needs wq Shard(head) and the " + std::to_string(members) +
                 " ranks dividing n_kv_head = " + std::to_string(args.n_kv_head) +
                 "; with fewer kv heads than ranks, make wk and wv Replicate (each kv head is "
                 "shared by the ranks whose query heads read it)");
  }
  ctx.define(step, "output",
             {x.shape,
              x.layout.with(step.mesh_dim, heads ? Placement::partial() : Placement::replicate())});
}

}  // namespace

template <>
OpEntry op_entry<OpKind::gqa_attention>() {
  using A = GqaAttentionArgs;
  return OpEntryBuilder<A>(OpKind::gqa_attention,
                           "causal self-attention with grouped key/value heads (GQA; MQA at one "
                           "kv head) and RoPE, tensor-parallel by heads (Megatron): query head h "
                           "reads kv head h / (n_head / n_kv_head)")
      .tensor("input", &A::input,
              "x, [batch, seq, hidden], Replicate on the step's dim; Shard(seq) on one dim: "
              "context parallelism there")
      .tensor("wq", &A::wq, "query projection, [hidden, head, head_dim]: Replicate or Shard(head)")
      .tensor("wk", &A::wk,
              "key projection, [hidden, kv_head, head_dim]: Replicate or Shard(kv_head)")
      .tensor("wv", &A::wv, "value projection, [hidden, kv_head, head_dim], placed like wk")
      .tensor("wo", &A::wo, "output projection, [head, head_dim, hidden], placed like wq")
      .output("output", &A::output,
              "y = attn wo, [batch, seq, hidden]: Partial(sum) with sharded heads, else Replicate")
      .integer("n_head", &A::n_head, true, "query heads", {.low = 1})
      .integer("n_kv_head", &A::n_kv_head, true, "key/value heads, dividing n_head", {.low = 1})
      .integer("head_dim", &A::head_dim, true, "per-head width (even with RoPE)", {.low = 1})
      .number("rope_theta", &A::rope_theta, false, "RoPE base theta (default 10000)",
              {.low = 0,
               .high = std::numeric_limits<float>::max(),
               .low_open = true,
               .note = "(the f32 range: f32 runs use float(rope_theta))"})
      .text("rope", &A::rope, "RoPE pairing (default rotate_half), or none",
            {"rotate_half", "interleaved", "none"})
      .optional_text("cp_mode", &A::cp_mode,
                     "context parallelism where the input is Shard(seq) on a mesh dim: allgather "
                     "(default; K and V all-gathered), ring (KV blocks passed around the group) or "
                     "ulysses (all-to-all to head groups and back)",
                     {"allgather", "ring", "ulysses"})
      .rules(gqa_rules)
      .build();
}

}  // namespace shardsim
