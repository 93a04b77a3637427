// Two signatures of a language model's step (context.hpp): the vocab-parallel cross-entropy's
// parts recomputed from the oracle's logits under the known mistakes, and a parameter used twice
// (tied embedding and LM head) whose gradient holds one use only.
#include <algorithm>
#include <cmath>
#include <limits>

#include "diagnosis/context.hpp"
#include "diagnosis/format.hpp"

namespace shardsim::diag {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The oracle's logits as rows of one token each, and what the sharded program's vocab split
// makes of them.
struct Logits {
  std::vector<double> values;  // [tokens, vocab], row-major
  std::int64_t tokens = 0, vocab = 0;
  std::vector<Slice> shards;  // each rank's columns (Shard(vocab) on the 1-D mesh)
  std::int64_t pads = 0;      // padded columns over all ranks (a padded split)

  double at(std::int64_t t, std::int64_t c) const {
    return values[static_cast<std::size_t>(t * vocab + c)];
  }
  // The max and the sum of exp(l - max) of token t over columns [begin, end) plus `zeros`
  // columns of logit 0 (padding); max = -inf and sum 0 over no column.
  std::pair<double, double> softmax_stats(std::int64_t t, std::int64_t begin, std::int64_t end,
                                          std::int64_t zeros) const {
    double top = zeros > 0 ? 0.0 : -kInf;
    for (std::int64_t c = begin; c < end; ++c) top = std::max(top, at(t, c));
    if (top == -kInf) return {top, 0.0};
    double sum = static_cast<double>(zeros) * std::exp(-top);
    for (std::int64_t c = begin; c < end; ++c) sum += std::exp(at(t, c) - top);
    return {top, sum};
  }
};

// The normwise gap of every rank's copy (a Replicate boundary) from its own reference.
double ranks_gap(const Observed& o, const std::vector<std::vector<double>>& reference) {
  double gap = 0, scale = 0;
  for (std::size_t r = 0; r < o.ranks.size(); ++r) {
    for (std::size_t i = 0; i < reference[r].size(); ++i) {
      gap = std::max(gap, std::abs(o.ranks[r][i] - reference[r][i]));
      scale = std::max(scale, std::abs(reference[r][i]));
    }
  }
  if (std::isnan(gap)) return kInf;
  return scale > 0 ? gap / scale : gap;
}

struct Variant {
  std::string what;
  Cause cause;
  std::vector<std::vector<double>> per_rank;  // the recomputed values each rank would hold
};

// The cross-entropy part `part` under each mistake, per token, as every rank would hold it.
std::vector<Variant> ce_variants(const Logits& l, const std::vector<std::int64_t>& labels,
                                 std::int64_t ignore, const std::string& part, int ranks) {
  std::vector<Variant> out;
  const auto same = [&](std::vector<double> values) {
    return std::vector<std::vector<double>>(static_cast<std::size_t>(ranks), values);
  };
  std::vector<double> padded_max, padded_sum, total;
  std::vector<std::vector<double>> local_max(static_cast<std::size_t>(ranks));
  std::vector<std::vector<double>> local_sum(local_max.size()), col0(local_max.size());
  for (std::int64_t t = 0; t < l.tokens; ++t) {
    const auto [m, s] = l.softmax_stats(t, 0, l.vocab, 0);
    const auto [pm, ps] = l.softmax_stats(t, 0, l.vocab, l.pads);
    padded_max.push_back(pm);
    padded_sum.push_back(ps);
    const std::int64_t label = labels[static_cast<std::size_t>(t)];
    double target = label == ignore ? 0.0 : l.at(t, label);
    for (int r = 0; r < ranks; ++r) {
      const Slice& sh = l.shards[static_cast<std::size_t>(r)];
      local_max[static_cast<std::size_t>(r)].push_back(
          l.softmax_stats(t, sh.begin, sh.end, 0).first);
      double own = 0;
      for (std::int64_t c = sh.begin; c < sh.end; ++c) own += std::exp(l.at(t, c) - m);
      local_sum[static_cast<std::size_t>(r)].push_back(own);
      if (label != ignore && !sh.holds(label) && sh.end > sh.begin) target += l.at(t, sh.begin);
    }
    total.push_back(target);
  }
  if (part == "max") {
    out.push_back({"each rank's maximum over its own vocabulary shard, never all-reduced",
                   Cause::vocab_reduction, local_max});
    out.push_back({"the padded vocabulary columns (logit 0) inside the maximum",
                   Cause::padding_not_masked, same(padded_max)});
  } else if (part == "sumexp") {
    out.push_back({"each rank's own sum of exp(logit - max), never all-reduced",
                   Cause::vocab_reduction, local_sum});
    if (l.pads > 0) {
      out.push_back({"the " + std::to_string(l.pads) +
                         " padded vocabulary columns (logit 0) inside the softmax's sum",
                     Cause::padding_not_masked, same(padded_sum)});
    }
  } else if (part == "target_logit") {
    out.push_back(
        {"every rank adds a logit: the owner its target's, the others their shard's "
         "first column (the target not masked to its owner)",
         Cause::vocab_reduction, same(total)});
  } else if (part == "lse" && l.pads > 0) {
    std::vector<double> lse;
    for (std::size_t t = 0; t < padded_max.size(); ++t) {
      lse.push_back(padded_max[t] + std::log(padded_sum[t]));
    }
    out.push_back({"the padded vocabulary columns (logit 0) inside the log-sum-exp",
                   Cause::padding_not_masked, same(lse)});
  }
  return out;
}

// The logits' columns as the 1-D mesh splits them.
std::optional<Logits> logits_of(Context& ctx, int logits_id, const std::string& axis) {
  const Observed& o = ctx.observed(logits_id);
  const Shape& shape = o.entry.global;
  if (shape.rank() < 2 || shape.axes().back().name != axis) return std::nullopt;
  Logits l;
  l.values = o.dense;
  l.vocab = shape.extent(axis);
  l.tokens = shape.numel() / l.vocab;
  const Placement& p = placement_1d(o.entry);
  const int ranks = static_cast<int>(o.ranks.size());
  if (p.is_shard() && p.axis == axis) {
    l.shards = shard_slices(l.vocab, ranks, p.split);
    for (const Slice& s : l.shards) l.pads += s.pad();
  } else {
    l.shards.assign(static_cast<std::size_t>(ranks), Slice{0, l.vocab, l.vocab, 0, 0});
  }
  return l;
}

}  // namespace

Finding vocab_signature(Context& ctx, int id) {
  Finding f{.signature = "vocab_parallel", .cause = Cause::vocab_reduction};
  const StepSpec* step = ctx.owning_step(id);
  const Observed& o = ctx.observed(id);
  if (!step || step->kind != OpKind::cross_entropy || !o.entry.layout.is_replicate() ||
      o.dense.empty()) {
    f.evidence = "n/a: not a Replicate part of a cross_entropy step";
    return f;
  }
  const auto& a = step->as<CrossEntropyArgs>();
  const std::string prefix = a.output + ".";
  const std::string part =
      o.entry.dense.starts_with(prefix) ? o.entry.dense.substr(prefix.size()) : "";
  const auto logits_id = ctx.latest(a.input, id);
  const TensorSpec* labels = ctx.scenario().find_ids(a.labels);
  const std::optional<Logits> l =
      logits_id && labels ? logits_of(ctx, *logits_id, a.vocab_axis) : std::nullopt;
  if (!l || static_cast<std::int64_t>(labels->ids->size()) != l->tokens) {
    f.evidence = "n/a: the cross-entropy's logits or labels not captured whole";
    return f;
  }
  const double correct = normwise_gap(o);
  const double fit = kFitUlps * ctx.unit();
  if (part == "valid_tokens" && o.dense.size() == 1) {
    // The count with the ignored tokens in it: every token of the labels.
    const auto every = static_cast<double>(l->tokens);
    if (o.dense[0] != every && ranks_gap(o, std::vector<std::vector<double>>(
                                                o.ranks.size(), std::vector<double>{every})) == 0) {
      f.cause = Cause::padding_not_masked;
      f.confidence = 0.9;
      f.evidence = "the ranks count every one of the " + std::to_string(l->tokens) +
                   " tokens, the ignored ones (label " + std::to_string(a.ignore_index) +
                   ") included; the oracle counts " + num(o.dense[0]);
      return f;
    }
  }
  if (static_cast<std::int64_t>(o.dense.size()) != l->tokens) {
    f.evidence = "n/a: not a per-token part of the cross-entropy";
    return f;
  }
  for (const Variant& v :
       ce_variants(*l, *labels->ids, a.ignore_index, part, static_cast<int>(o.ranks.size()))) {
    const double gap = ranks_gap(o, v.per_rank);
    if (gap <= fit && correct > 16 * fit) {
      f.cause = v.cause;
      f.confidence = 0.9;
      f.evidence = "recomputed from the oracle's " + a.input + ": " + v.what + " reproduces " +
                   o.entry.tensor + " (gap " + num(gap) + "; the specified algorithm's " +
                   num(correct) + ")";
      return f;
    }
  }
  f.evidence = "no known cross-entropy mistake reproduces " + o.entry.tensor;
  return f;
}

Finding tied_uses_signature(Context& ctx, int id) {
  Finding f{.signature = "tied_uses", .cause = Cause::tied_gradient};
  const TraceEntry& e = ctx.entry(id);
  const int first_id = id > 0 ? ctx.latest(e.tensor, id - 1, true).value_or(-1) : -1;
  const auto backward = [](const std::string& op) { return op.ends_with("_backward"); };
  if (!is_grad_name(e.tensor) || first_id < 0 || ctx.entry(first_id).op == e.op ||
      !backward(e.op) || !backward(ctx.entry(first_id).op) || ctx.observed(id).dense.empty()) {
    f.evidence = "n/a: not a gradient that a second use of its parameter adds to";
    return f;
  }
  const Observed& o = ctx.observed(id);
  const std::vector<double>& before = ctx.observed(first_id).dense;
  if (before.size() != o.dense.size()) {
    f.evidence = "n/a: the earlier use's gradient has another shape";
    return f;
  }
  std::vector<double> this_use(o.dense.size());
  double share = 0, scale = 0;
  for (std::size_t i = 0; i < this_use.size(); ++i) {
    this_use[i] = o.dense[i] - before[i];
    share = std::max(share, std::abs(this_use[i]));
    scale = std::max(scale, std::abs(o.dense[i]));
  }
  if (!(share > kFitUlps * ctx.unit() * scale)) {
    f.evidence = "n/a: the earlier " + e.tensor + " is the same gradient, not another use's";
    return f;
  }
  const double correct = normwise_gap(o);
  const double fit = kFitUlps * ctx.unit();
  const std::string first = ctx.entry(first_id).op;
  const std::string at = " (#" + std::to_string(first_id) + ")";
  const std::pair<std::string, double> variants[] = {
      {"this use's (" + e.op + ") share alone, without the " + first + " share before it" + at,
       normwise_gap_to(o, this_use)},
      {"the " + first + " share alone" + at + ", without this use's", normwise_gap_to(o, before)}};
  for (const auto& [what, gap] : variants) {
    if (gap <= fit && correct > 16 * fit) {
      f.confidence = 0.9;
      f.evidence = e.tensor + " sums two uses of its parameter; the ranks hold " + what + " (gap " +
                   num(gap) + "; the sum's " + num(correct) + ")";
      return f;
    }
  }
  f.evidence = "neither use's share alone reproduces " + e.tensor;
  return f;
}

}  // namespace shardsim::diag
