// The diagnosis context and the signatures whose inputs it finds (context.hpp).
#include "diagnosis/context.hpp"

#include <algorithm>
#include <cmath>
#include <set>

#include "core/error.hpp"

namespace shardsim::diag {

Context::Context(const Scenario& scenario, RunReport run)
    : scenario_(scenario), run_(std::move(run)) {}

const Observed& Context::observed(int id) {
  auto found = observed_.find(id);
  if (found == observed_.end()) found = observed_.emplace(id, observed_from(result(id))).first;
  return found->second;
}

double Context::unit() const {
  if (run_.precision.is_narrow() || run_.precision.is_expansion()) {
    return std::ldexp(1.0, -static_cast<int>(run_.precision.bits));
  }
  return std::ldexp(1.0, run_.precision.kind == ScalarKind::f32 ? -24 : -53);
}

std::optional<int> Context::latest(const std::string& name, int before, bool same_chunk) const {
  for (int id = before; id >= 0; --id) {
    const BoundaryResult& b = result(id);
    if (same_chunk &&
        (b.entry.step != entry(before).step || b.entry.chunk != entry(before).chunk)) {
      continue;
    }
    if ((b.entry.tensor == name || b.entry.dense == name) && b.captured && b.captured->has_dense) {
      return id;
    }
  }
  return std::nullopt;
}

std::optional<int> Context::failing(const std::string& name, int near) const {
  for (const BoundaryResult& b : run_.boundaries) {
    if (b.entry.step == entry(near).step && b.entry.chunk == entry(near).chunk &&
        b.entry.dense == name && b.status == Status::fail) {
      return b.entry.id;
    }
  }
  return std::nullopt;
}

const StepSpec* Context::owning_step(int id) const {
  const TraceEntry& e = entry(id);
  if (is_grad_name(e.tensor)) return nullptr;
  for (const StepSpec& step : scenario_.steps) {
    const std::string& output = step.output();
    if (!output.empty() && (derived_from(e.dense, output) || derived_from(e.tensor, output))) {
      return &step;
    }
  }
  return nullptr;
}

bool Context::carried_state(int id) const {
  const TraceEntry& e = entry(id);
  if (e.chunk < 2) return false;
  for (const BoundaryResult& b : run_.boundaries) {
    if (b.entry.step == e.step && b.entry.chunk == 1 && b.entry.op == e.op &&
        b.entry.tensor == e.tensor) {
      return false;
    }
  }
  return true;
}

std::vector<NamedCount> program_counts(const Scenario& scenario) {
  std::vector<NamedCount> counts{{"ranks", scenario.mesh.ranks()}};
  std::set<std::pair<std::string, std::int64_t>> seen;
  for (const auto& [name, layout] : scenario.tensor_layouts) {
    for (const Axis& axis : layout.shape.axes()) {
      if (seen.insert({axis.name, axis.extent}).second) counts.push_back({axis.name, axis.extent});
    }
    if (layout.shape.has("batch") && layout.shape.has("seq")) {
      // The valid tokens of a masked loss over this layout.
      for (const StepSpec& step : scenario.steps) {
        if (step.kind != OpKind::mse_loss) continue;
        const auto& lengths = step.as<MseLossArgs>().valid_lengths;
        if (!lengths) continue;
        std::int64_t valid = 0;
        for (std::int64_t length : *lengths) {
          valid += std::min(length, layout.shape.extent("seq"));
        }
        if (seen.insert({"valid tokens", valid}).second) counts.push_back({"valid tokens", valid});
      }
      const std::int64_t tokens = layout.shape.extent("batch") * layout.shape.extent("seq");
      if (seen.insert({"batch*seq", tokens}).second) counts.push_back({"batch*seq", tokens});
    }
  }
  return counts;
}

Finding replica_signature(Context& ctx, int id) {
  const TraceEntry& e = ctx.entry(id);
  std::string name = e.tensor;
  const std::string suffix = "@replicas";
  if (name.ends_with(suffix)) name.resize(name.size() - suffix.size());
  const TensorSpec* spec = ctx.scenario().find_tensor(name);
  if (!spec || spec->role != TensorRole::parameter || !e.layout.is_replicate()) {
    return {.signature = "replica_drift",
            .cause = Cause::unreduced_gradients,
            .evidence = "n/a: not a replicated parameter"};
  }
  const Observed* before = nullptr;
  const Observed* shares = nullptr;
  for (int b = id - 1; b >= 0 && !before; --b) {
    const TraceEntry& earlier = ctx.entry(b);
    if (earlier.tensor == name && earlier.kind != BoundaryKind::check &&
        ctx.result(b).captured->has_dense) {
      before = &ctx.observed(b);
    }
    if (!shares && earlier.tensor == grad_name(name) && earlier.layout.has_partial()) {
      shares = &ctx.observed(b);
    }
  }
  return replica_drift(ctx.observed(id), before, shares, ctx.unit());
}

Finding mask_signature(Context& ctx, int id) {
  const TraceEntry& e = ctx.entry(id);
  const std::string suffix = "@repetition";
  int mask = id;
  std::optional<int> check;
  if (e.tensor.ends_with(suffix)) {
    check = id;
    const std::string name = e.tensor.substr(0, e.tensor.size() - suffix.size());
    for (int b = id + 1; b < static_cast<int>(ctx.run().boundaries.size()); ++b) {
      if (ctx.entry(b).tensor == name) {
        mask = b;
        break;
      }
    }
  } else {
    check = ctx.latest(moved_name(e.tensor, "repetition"), id, true);
  }
  return mask_pattern(ctx.observed(mask), check ? &ctx.observed(*check) : nullptr);
}

Finding rope_signature(Context& ctx, int id) {
  const TraceEntry& e = ctx.entry(id);
  RopeGeometry rope;
  rope.pos_axis = e.global.has("kv") ? "kv" : "seq";
  std::int64_t longest = 1;
  for (const TensorSpec& t : ctx.scenario().tensors) {
    if (t.shape.has("seq")) longest = std::max(longest, t.shape.extent("seq"));
  }
  rope.max_shift = 2 * longest + 2;
  // The RoPE parameters of the step that owns the boundary, else of the first step with any.
  const StepSpec* step = ctx.owning_step(id);
  auto has_rope = [](const StepSpec* s) {
    return s && s->kind == OpKind::sliding_window_attention;
  };
  for (const StepSpec& other : ctx.scenario().steps) {
    if (!has_rope(step) && has_rope(&other)) step = &other;
  }
  if (has_rope(step)) {
    const auto& args = step->as<SlidingWindowAttentionArgs>();
    rope.theta = args.rope_theta;
    rope.interleaved = args.rope == "interleaved";
  }
  return rope_rotation(ctx.observed(id), rope, ctx.unit());
}

namespace {

// The oracle's keys of a chunk, cache ++ new (both [batch, kv, head, head_dim]), joined along kv.
// Empty when either has no oracle values or their other extents differ.
std::optional<Observed> joined_keys(const Observed& cache, const Observed& fresh,
                                    const std::string& name) {
  const Shape& a = cache.entry.global;
  const Shape& b = fresh.entry.global;
  if (cache.dense.empty() || fresh.dense.empty() || a.rank() != 4 || b.rank() != 4 ||
      !a.has("kv") || !b.has("kv") || !(a.without("kv") == b.without("kv")) || a[1].name != "kv" ||
      b[1].name != "kv") {
    return std::nullopt;
  }
  const std::int64_t batch = a[0].extent;
  const std::int64_t la = a.extent("kv") * a[2].extent * a[3].extent;  // per batch row
  const std::int64_t lb = b.extent("kv") * b[2].extent * b[3].extent;
  std::vector<double> dense;
  for (std::int64_t i = 0; i < batch; ++i) {
    dense.insert(dense.end(), cache.dense.begin() + i * la, cache.dense.begin() + (i + 1) * la);
    dense.insert(dense.end(), fresh.dense.begin() + i * lb, fresh.dense.begin() + (i + 1) * lb);
  }
  return observed_of(name, a.with_extent("kv", a.extent("kv") + b.extent("kv")),
                     Placement::replicate(), 1, std::move(dense));
}

}  // namespace

Finding window_signature(Context& ctx, int id) {
  const StepSpec* step = ctx.owning_step(id);
  const std::string output = step ? step->output() : "";
  AttentionCase c;
  std::optional<Observed> joined;  // cache ++ new keys, where no boundary holds them together
  if (step && step->kind == OpKind::sliding_window_attention &&
      ctx.entry(id).dense == part_name(output, "lse")) {
    const auto q = ctx.latest(part_name(output, "q_rot"), id, true);
    const auto k = ctx.latest(part_name(output, "k_all"), id, true);
    const Observed* keys = k ? &ctx.observed(*k) : nullptr;
    if (!keys) {
      // Sequence-sharded ulysses keeps the cache apart from the chunk's keys (NAME.cache_k and
      // NAME.k_new): the oracle's k_all is the two joined.
      const auto cache = ctx.latest(part_name(output, "cache_k"), id, true);
      const auto fresh = ctx.latest(part_name(output, "k_new"), id, true);
      if (cache && fresh) {
        joined =
            joined_keys(ctx.observed(*cache), ctx.observed(*fresh), part_name(output, "k_all"));
        if (joined) keys = &*joined;
      }
    }
    if (q && keys) {
      c.q = &ctx.observed(*q);
      c.k = keys;
      c.lse = &ctx.observed(id);
      if (const auto window = step->as<SlidingWindowAttentionArgs>().window) c.window = *window;
    }
  }
  return window_mask(c, ctx.unit());
}

Finding ring_signature(Context& ctx, int id) {
  const TraceEntry& e = ctx.entry(id);
  RingCase c;
  const StepSpec* step = ctx.owning_step(id);
  if (!step && is_grad_name(e.tensor)) {
    // A ring backward boundary, grad(NAME.part): the attention step that owns NAME.
    for (const StepSpec& s : ctx.scenario().steps) {
      std::string prefix = grad_name(s.output() + ".");  // "grad(NAME.)" without its ")"
      prefix.pop_back();
      if (s.kind == OpKind::sliding_window_attention && e.tensor.starts_with(prefix)) step = &s;
    }
  }
  if (step && step->kind == OpKind::sliding_window_attention &&
      e.op.starts_with("ring_attention")) {
    const auto& args = step->as<SlidingWindowAttentionArgs>();
    if (const auto k = ctx.latest(part_name(args.output, "k_shard"), id, true)) {
      c.o = &ctx.observed(id);
      c.kv = ctx.entry(*k).global.extent("kv");
      c.window = args.window;
      c.group = static_cast<int>(ctx.observed(id).ranks.size());
      // The blocks as the keys were split: torch.chunk, balanced (tensor_split) or zigzag.
      for (const Placement& p : ctx.entry(*k).layout.dims) {
        if (p.is_shard() && p.axis == "kv") c.split = p.split;
      }
    }
  }
  return ring_merge(c, ctx.unit());
}

Finding provenance_signature(Context& ctx, int id) {
  std::vector<const Observed*> earlier;
  for (int b = 0; b < id; ++b) {
    if (ctx.result(b).captured && ctx.result(b).captured->has_dense)
      earlier.push_back(&ctx.observed(b));
  }
  return provenance(ctx.observed(id), earlier, ctx.carried_state(id));
}

namespace {

std::vector<double> dense_of(Context& ctx, const std::optional<std::string>& name, int id) {
  if (!name) return {};
  const auto at = ctx.latest(*name, id);
  return at ? ctx.observed(*at).dense : std::vector<double>{};
}

}  // namespace

Finding norm_signature(Context& ctx, int id) {
  const StepSpec* step = ctx.owning_step(id);
  NormCase c;
  if (step && (step->kind == OpKind::layer_norm || step->kind == OpKind::rms_norm)) {
    const std::string output = step->output();
    c.rms = step->kind == OpKind::rms_norm;
    std::string input;
    if (c.rms) {
      const auto& args = step->as<RmsNormArgs>();
      c.axis = args.axis;
      c.eps = args.eps;
      input = args.input;
      c.weight = dense_of(ctx, args.weight, id);
    } else {
      const auto& args = step->as<LayerNormArgs>();
      c.axis = args.axis;
      c.eps = args.eps;
      input = args.input;
      c.weight = dense_of(ctx, args.weight, id);
      c.bias = dense_of(ctx, args.bias, id);
    }
    if (const auto x = ctx.latest(input, id)) c.x = &ctx.observed(*x);
    auto output_at = [&](const std::string& name) -> const Observed* {
      const auto at = ctx.failing(name, id);
      return at ? &ctx.observed(*at) : nullptr;
    };
    c.mean = output_at(part_name(output, "mean"));
    c.rstd = output_at(part_name(output, c.rms ? "rrms" : "rstd"));
    c.y = output_at(output);
  }
  return norm_convention(c, ctx.unit());
}

Finding loss_signature(Context& ctx, int id) {
  const StepSpec* step = ctx.owning_step(id);
  if (!step && is_grad_name(ctx.entry(id).tensor)) {
    // The loss's own backward: grad(INPUT) of an mse_loss step.
    for (const StepSpec& s : ctx.scenario().steps) {
      if (s.kind == OpKind::mse_loss &&
          grad_name(s.as<MseLossArgs>().input) == ctx.entry(id).tensor) {
        step = &s;
      }
    }
  }
  // A micro-batched loss is not weighed: its tokens' batch index is the micro-batch's, which the
  // weightings would read valid_lengths with, and none of them models the step's count.
  if (ctx.entry(id).micro_count > 0) step = nullptr;
  LossCase c;
  if (step && step->kind == OpKind::mse_loss) {
    const auto& args = step->as<MseLossArgs>();
    const std::string& output = args.output;
    if (const auto y = ctx.latest(args.input, id)) c.y = &ctx.observed(*y);
    if (const auto t = ctx.latest(args.target, id)) c.target = &ctx.observed(*t);
    if (args.valid_lengths) c.valid_lengths = *args.valid_lengths;
    c.batch_axis = args.batch_axis;
    c.seq_axis = args.seq_axis;
    auto output_at = [&](const std::string& name) -> const Observed* {
      const auto at = ctx.failing(name, id);
      return at ? &ctx.observed(*at) : nullptr;
    };
    c.sum = output_at(part_name(output, "sum"));
    c.count = output_at(part_name(output, "valid_tokens"));
    c.loss = output_at(output);
    c.grad = output_at(grad_name(args.input));
  }
  return loss_weighting(c, ctx.unit());
}

}  // namespace shardsim::diag
