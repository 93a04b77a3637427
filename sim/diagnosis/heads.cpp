// Two signatures of tensor-parallel attention (context.hpp): the kv group a query head reads, and
// a gradient every rank holds only its own share of.
#include <algorithm>
#include <cmath>
#include <limits>

#include "diagnosis/context.hpp"
#include "diagnosis/format.hpp"

namespace shardsim::diag {

namespace {

// Causal softmax attention in double: q [b, s, H, D] over k, v [b, s, KV, D], query head h
// reading kv head kv_of(h); out [b, s, H, D].
template <typename KvOf>
std::vector<double> attend(const std::vector<double>& q, const std::vector<double>& k,
                           const std::vector<double>& v, std::int64_t batch, std::int64_t seq,
                           std::int64_t heads, std::int64_t kv_heads, std::int64_t dim,
                           KvOf kv_of) {
  std::vector<double> out(q.size(), 0.0);
  const double scale = 1 / std::sqrt(static_cast<double>(dim));
  const auto qi = [&](std::int64_t b, std::int64_t s, std::int64_t h) {
    return static_cast<std::size_t>(((b * seq + s) * heads + h) * dim);
  };
  const auto ki = [&](std::int64_t b, std::int64_t s, std::int64_t h) {
    return static_cast<std::size_t>(((b * seq + s) * kv_heads + h) * dim);
  };
  std::vector<double> score(static_cast<std::size_t>(seq));
  const auto at = [](std::int64_t j) { return static_cast<std::size_t>(j); };
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t h = 0; h < heads; ++h) {
      const std::int64_t g = kv_of(h);
      for (std::int64_t i = 0; i < seq; ++i) {
        double top = -std::numeric_limits<double>::infinity();
        for (std::int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (std::int64_t d = 0; d < dim; ++d) dot += q[qi(b, i, h) + d] * k[ki(b, j, g) + d];
          score[at(j)] = dot * scale;
          top = std::max(top, score[at(j)]);
        }
        double sum = 0;
        for (std::int64_t j = 0; j <= i; ++j) sum += (score[at(j)] = std::exp(score[at(j)] - top));
        for (std::int64_t j = 0; j <= i; ++j) {
          for (std::int64_t d = 0; d < dim; ++d) {
            out[qi(b, i, h) + d] += score[at(j)] / sum * v[ki(b, j, g) + d];
          }
        }
      }
    }
  }
  return out;
}

}  // namespace

Finding kv_group_signature(Context& ctx, int id) {
  Finding f{.signature = "kv_group", .cause = Cause::head_grouping};
  const TraceEntry& e = ctx.entry(id);
  const StepSpec* step = ctx.owning_step(id);
  if (e.op != "gqa_attention" || !step || step->kind != OpKind::gqa_attention ||
      e.tensor != part_name(step->output(), "attn")) {
    f.evidence = "n/a: not the attention output of a gqa_attention step";
    return f;
  }
  const auto& a = step->as<GqaAttentionArgs>();
  const auto q = ctx.latest(part_name(a.output, "q_rot"), id);
  const auto k = ctx.latest(part_name(a.output, "k_rot"), id);
  const auto v = ctx.latest(part_name(a.output, "v"), id);
  if (!q || !k || !v) {
    f.evidence = "n/a: the rotated queries and keys or the values were not captured";
    return f;
  }
  const Shape& shape = e.global;
  const std::int64_t batch = shape.extent("batch");
  const std::int64_t seq = shape.extent("seq");
  const std::int64_t group = a.n_head / a.n_kv_head;
  const auto run = [&](auto kv_of) {
    return normwise_gap_to(ctx.observed(id),
                  attend(ctx.observed(*q).dense, ctx.observed(*k).dense, ctx.observed(*v).dense,
                         batch, seq, a.n_head, a.n_kv_head, a.head_dim, kv_of));
  };
  const double correct = run([&](std::int64_t h) { return h / group; });
  const double fit = 4096 * ctx.unit();
  const std::pair<const char*, double> variants[] = {
      {"query head h reads kv head h % n_kv_head instead of h / (n_head / n_kv_head)",
       run([&](std::int64_t h) { return h % a.n_kv_head; })},
      {"every query head reads kv head 0 (one kv head assumed)",
       run([](std::int64_t) { return std::int64_t{0}; })}};
  for (const auto& [what, gap] : variants) {
    if (gap <= fit && correct > 16 * fit) {
      f.confidence = 0.9;
      f.evidence = std::string("recomputed from the oracle's q_rot, k_rot and v: ") + what +
                   " reproduces the ranks' attn (gap " + num(gap) + "; the specified grouping's " +
                   num(correct) + ")";
      return f;
    }
  }
  f.evidence = "no other kv grouping reproduces the ranks' attn (the specified one's gap " +
               num(correct) + ")";
  return f;
}

Finding unreduced_share_signature(Context& ctx, int id) {
  Finding f{.signature = "unreduced_share", .cause = Cause::unreduced_gradients};
  const Observed& o = ctx.observed(id);
  if (!o.entry.layout.is_replicate() || o.ranks.size() < 2 || o.dense.empty()) {
    f.evidence = "n/a: not a tensor held Replicate on two or more ranks";
    return f;
  }
  if (!is_grad_name(o.entry.tensor)) f.cause = Cause::unreduced_partial;
  std::vector<double> sum(o.dense.size(), 0.0);
  for (const std::vector<double>& local : o.ranks) {
    if (local.size() != sum.size()) {
      f.evidence = "n/a: the ranks' tensors are not whole";
      return f;
    }
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += local[i];
  }
  double gap = 0;
  double scale = 0;
  double spread = 0;
  for (std::size_t i = 0; i < sum.size(); ++i) {
    gap = std::max(gap, std::abs(sum[i] - o.dense[i]));
    scale = std::max(scale, std::abs(o.dense[i]));
    spread = std::max(spread, std::abs(o.ranks[1][i] - o.ranks[0][i]));
  }
  const double rel = scale > 0 ? gap / scale : gap;
  if (spread > 0 && rel <= 4096 * ctx.unit()) {
    f.confidence = 0.9;
    f.evidence = "the " + std::to_string(o.ranks.size()) + " ranks' copies of " + o.entry.tensor +
                 " differ and sum to the oracle's (gap " + num(rel) +
                 "): each holds its own share, never reduced";
    return f;
  }
  f.evidence = "the ranks' copies do not sum to the oracle's (gap " + num(rel) + ")";
  return f;
}

}  // namespace shardsim::diag
