// window_mask: the attention log-sum-exp recomputed with the mask bound moved by one.
#include <algorithm>
#include <cmath>
#include <functional>

#include "diagnosis/signatures.hpp"
#include "diagnosis/format.hpp"

namespace shardsim {

namespace {

using diag::num;

struct MaskVariant {
  std::string text;                           // the allowed distances q - k
  std::function<bool(std::int64_t)> allowed;  // of the distance q_pos - k_pos
};

// lse (batch, seq, head) over keys whose distance passes `allowed`; keys of chunk kv = L + seq
// sit L positions before the queries' first (attention.hpp: 0 <= q - k < window).
std::vector<double> lse_under(const Observed& q, const Observed& k,
                              const std::function<bool(std::int64_t)>& allowed) {
  const Shape& qs = q.entry.global;
  const std::int64_t batch = qs.extent("batch"), seq = qs.extent("seq"), heads = qs.extent("head");
  const std::int64_t dim = qs.extent("head_dim"), kv = k.entry.global.extent("kv");
  const std::int64_t cached = kv - seq;
  const double scale = 1 / std::sqrt(static_cast<double>(dim));
  std::vector<double> out;
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t i = 0; i < seq; ++i) {
      for (std::int64_t h = 0; h < heads; ++h) {
        std::vector<double> scores;
        for (std::int64_t j = 0; j < kv; ++j) {
          if (!allowed(cached + i - j)) continue;
          double dot = 0;
          for (std::int64_t d = 0; d < dim; ++d) {
            dot += q.dense[static_cast<std::size_t>(((b * seq + i) * heads + h) * dim + d)] *
                   k.dense[static_cast<std::size_t>(((b * kv + j) * heads + h) * dim + d)];
          }
          scores.push_back(dot * scale);
        }
        if (scores.empty()) {
          out.push_back(-INFINITY);
          continue;
        }
        const double top = *std::max_element(scores.begin(), scores.end());
        double sum = 0;
        for (double score : scores) sum += std::exp(score - top);
        out.push_back(top + std::log(sum));
      }
    }
  }
  return out;
}

// max |s - a| / max |a| over the held elements, infinities matching only themselves.
double residual(const Observed& o, const std::vector<double>& alternative) {
  double scale = 0, worst = 0;
  for (double a : alternative) {
    if (std::isfinite(a)) scale = std::max(scale, std::fabs(a));
  }
  for (const Held& h : held_elements(o)) {
    const double a = alternative[static_cast<std::size_t>(h.global)];
    if (h.sharded == a) continue;
    worst = std::max(
        worst, std::isfinite(a) && std::isfinite(h.sharded) ? std::fabs(h.sharded - a) : INFINITY);
  }
  return scale > 0 ? worst / scale : worst;
}

}  // namespace

Finding window_mask(const AttentionCase& c, double unit) {
  Finding f{.signature = "window_mask", .cause = Cause::position_offset};
  auto laid_out = [](const Observed* o, const std::vector<std::string>& axes) {
    if (!o || o->dense.empty() || o->entry.global.rank() != axes.size()) return false;
    for (std::size_t a = 0; a < axes.size(); ++a) {
      if (o->entry.global[a].name != axes[a]) return false;
    }
    return true;
  };
  if (!laid_out(c.lse, {"batch", "seq", "head"}) ||
      !laid_out(c.q, {"batch", "seq", "head", "head_dim"}) ||
      !laid_out(c.k, {"batch", "kv", "head", "head_dim"}) ||
      c.k->entry.global.extent("kv") < c.q->entry.global.extent("seq")) {
    f.evidence = "n/a: not an attention log-sum-exp with its queries and keys";
    return f;
  }
  const std::int64_t w = c.window.value_or(0);
  const std::string bound = c.window ? " < " + std::to_string(w) : "";
  const MaskVariant spec{"0 <= q - k" + bound,
                         [&](std::int64_t d) { return d >= 0 && (!c.window || d < w); }};
  std::vector<MaskVariant> variants{
      {"-1 <= q - k" + bound + ", the causal bound off by one (the next key admitted)",
       [&](std::int64_t d) { return d >= -1 && (!c.window || d < w); }}};
  if (c.window) {
    variants.push_back({"0 <= q - k <= " + std::to_string(w) + ", the window bound off by one",
                        [&](std::int64_t d) { return d >= 0 && d <= w; }});
    variants.push_back({"0 <= q - k < " + std::to_string(w - 1) + ", the window one short",
                        [&](std::int64_t d) { return d >= 0 && d < w - 1; }});
  }
  const double tolerance = kFitUlps * unit;
  const double spec_residual = residual(*c.lse, lse_under(*c.q, *c.k, spec.allowed));
  Observed dense_as_sharded = *c.lse;  // does the specified mask reproduce the oracle?
  dense_as_sharded.entry.layout = Layout({Placement::replicate()});
  dense_as_sharded.ranks.assign(1, c.lse->dense);
  if (residual(dense_as_sharded, lse_under(*c.q, *c.k, spec.allowed)) > tolerance) {
    f.evidence = "the specified mask does not reproduce the dense lse: geometry unknown";
    return f;
  }
  if (spec_residual <= tolerance) {
    f.evidence = "the specified mask reproduces " + c.lse->entry.tensor + " within rounding";
    return f;
  }
  for (const MaskVariant& variant : variants) {
    const double fit = residual(*c.lse, lse_under(*c.q, *c.k, variant.allowed));
    if (fit > tolerance || fit * 16 > spec_residual) continue;
    f.confidence = 0.95;
    f.evidence = "recomputed over keys with " + variant.text + ", the log-sum-exp reproduces " +
                 c.lse->entry.tensor + " (residual " + num(fit) + "); the specified " + spec.text +
                 " gives the dense values, " + num(spec_residual) + " away";
    return f;
  }
  f.evidence = "no mask bound moved by one reproduces " + c.lse->entry.tensor +
               " (specified: " + num(spec_residual) + ")";
  return f;
}

}  // namespace shardsim
