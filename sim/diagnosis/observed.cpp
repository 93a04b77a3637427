// Cause names and the Observed view of a boundary (signatures.hpp).
#include <cmath>

#include "diagnosis/signatures.hpp"
#include "core/error.hpp"

namespace shardsim {

std::string_view cause_name(Cause cause) {
  switch (cause) {
    case Cause::wrong_divisor:
      return "wrong_divisor";
    case Cause::unreduced_gradients:
      return "unreduced_gradients";
    case Cause::seed_repetition:
      return "seed_repetition";
    case Cause::rank_seed_offset:
      return "rank_seed_offset";
    case Cause::position_offset:
      return "position_offset";
    case Cause::cache_convention:
      return "cache_convention";
    case Cause::normalization_convention:
      return "normalization_convention";
    case Cause::hidden_cast:
      return "hidden_cast";
    case Cause::padding_not_masked:
      return "padding_not_masked";
    case Cause::axis_order:
      return "axis_order";
    case Cause::default_value:
      return "default_value";
    case Cause::wrong_stage:
      return "wrong_stage";
    case Cause::softmax_merge:
      return "softmax_merge";
    case Cause::optimizer_convention:
      return "optimizer_convention";
    case Cause::head_grouping:
      return "head_grouping";
    case Cause::vocab_reduction:
      return "vocab_reduction";
    case Cause::tied_gradient:
      return "tied_gradient";
    case Cause::unreduced_partial:
      return "unreduced_partial";
    case Cause::rounding:
      return "rounding";
  }
  return "?";
}

std::string_view cause_summary(Cause cause) {
  switch (cause) {
    case Cause::wrong_divisor:
      return "a mean taken twice, a sum instead of a mean, or the wrong divisor";
    case Cause::unreduced_gradients:
      return "gradients not all-reduced, or reduced over the wrong group";
    case Cause::seed_repetition:
      return "seed repetition: ranks draw the same random stream";
    case Cause::rank_seed_offset:
      return "per-rank seed offset: independent per-rank masks, not reproducible against the "
             "dense program";
    case Cause::position_offset:
      return "position offset: local instead of global positions (RoPE, causal/window mask)";
    case Cause::cache_convention:
      return "cache convention: the carried cache holds another stage (e.g. keys before RoPE)";
    case Cause::normalization_convention:
      return "normalization convention: another statistic (unbiased variance, local or pooled "
             "statistics, RMS vs LayerNorm, eps placement)";
    case Cause::hidden_cast:
      return "hidden cast: values rounded through a narrower type";
    case Cause::padding_not_masked:
      return "padding not masked: padding tokens carry weight";
    case Cause::axis_order:
      return "wrong axis order: token identity permuted (e.g. [seq, batch] read as [batch, seq])";
    case Cause::default_value:
      return "default value assumed: a constant (ones/zeros init) in place of the data";
    case Cause::wrong_stage:
      return "another stage's values: a transform skipped or applied twice, or a stale tensor";
    case Cause::softmax_merge:
      return "softmax merge: the partial results of KV blocks combined wrongly (the log-sum-exp "
             "merge of ring or flash attention)";
    case Cause::optimizer_convention:
      return "optimizer convention: another update rule (AdamW without bias correction, L2 "
             "instead of decoupled weight decay, eps inside the square root, a step count off "
             "by one)";
    case Cause::head_grouping:
      return "head grouping: query heads read the wrong kv heads (the GQA group of query head h "
             "is h / (n_head / n_kv_head))";
    case Cause::vocab_reduction:
      return "vocab-parallel reduction: a softmax statistic over the vocabulary taken on each "
             "rank's shard and never reduced (the maximum, the sum of exponentials), or the "
             "target logit counted on ranks that do not own it";
    case Cause::tied_gradient:
      return "tied weights: a parameter used twice (the embedding and the LM head) gets the "
             "gradient of one use only";
    case Cause::unreduced_partial:
      return "an unreduced Partial sum: a tensor-parallel output (a vocab- or row-parallel "
             "result) used as if all-reduced, each rank holding only its share";
    case Cause::rounding:
      return "not a bug: rounding noise, the gap shrinks with precision";
  }
  return "?";
}

Observed observed_from(const BoundaryResult& result) {
  SHARDSIM_ASSERT(result.captured != nullptr, "observed_from needs a captured boundary");
  Observed o;
  o.entry = result.entry;
  if (result.captured->has_dense) o.dense = result.captured->dense.f64;
  for (const CapturedValues& local : result.captured->ranks) o.ranks.push_back(local.f64);
  return o;
}

namespace {

// Visits (rank, local flat, global flat) for every element a Shard or Replicate rank holds.
template <typename Visit>
void for_each_slot(const Observed& o, Visit visit) {
  const Placement& placement = placement_1d(o.entry);
  const int ranks = static_cast<int>(o.ranks.size());
  for (int r = 0; r < ranks; ++r) {
    if (placement.is_replicate()) {
      for (std::size_t e = 0; e < o.ranks[static_cast<std::size_t>(r)].size(); ++e) {
        visit(r, static_cast<std::int64_t>(e), static_cast<std::int64_t>(e));
      }
      continue;
    }
    const Slice slice = rank_slice(o.entry.global, placement, ranks, r);
    const AxisView lv =
        AxisView::of(local_shape(o.entry.global, placement, ranks, r), placement.axis);
    const AxisView gv = AxisView::of(o.entry.global, placement.axis);
    for (std::int64_t outer = 0; outer < lv.outer; ++outer) {
      for (std::int64_t i = 0; i < slice.valid(); ++i) {
        for (std::int64_t j = 0; j < lv.inner; ++j) {
          visit(r, lv.flat(outer, i, j), gv.flat(outer, to_global(slice, i), j));
        }
      }
    }
  }
}

}  // namespace

Observed observed_of(const std::string& tensor, const Shape& global, const Placement& placement,
                     int ranks, std::vector<double> dense) {
  Observed o;
  o.entry.tensor = tensor;
  o.entry.dense = tensor;
  o.entry.global = global;
  o.entry.layout = Layout({placement});
  o.entry.mesh = std::make_shared<const Mesh>(ranks);
  o.entry.ranks = rank_extents(global, o.entry.layout, *o.entry.mesh);
  o.dense = std::move(dense);
  for (int r = 0; r < ranks; ++r) {
    const Shape local = local_shape(global, placement, ranks, r);
    o.ranks.emplace_back(static_cast<std::size_t>(local.numel()), 0.0);
  }
  if (placement.is_partial()) {
    o.ranks[0] = o.dense;
    return o;
  }
  for_each_slot(o, [&](int r, std::int64_t local, std::int64_t global) {
    o.ranks[static_cast<std::size_t>(r)][static_cast<std::size_t>(local)] =
        o.dense[static_cast<std::size_t>(global)];
  });
  return o;
}

std::vector<Held> held_elements(const Observed& o) {
  std::vector<Held> out;
  if (o.ranks.empty()) return out;
  if (o.entry.layout.has_partial()) {
    std::vector<double> sum = o.ranks[0];
    for (std::size_t r = 1; r < o.ranks.size(); ++r) {
      for (std::size_t e = 0; e < sum.size(); ++e) sum[e] += o.ranks[r][e];
    }
    for (std::size_t e = 0; e < sum.size(); ++e) {
      out.push_back({0, static_cast<std::int64_t>(e), sum[e]});
    }
    return out;
  }
  for_each_slot(o, [&](int r, std::int64_t local, std::int64_t global) {
    out.push_back(
        {r, global, o.ranks[static_cast<std::size_t>(r)][static_cast<std::size_t>(local)]});
  });
  return out;
}

void set_held(Observed& o, int rank, std::int64_t global, double value) {
  SHARDSIM_ASSERT(!o.entry.layout.has_partial(), "set_held: a Partial tensor has no holder");
  bool found = false;
  for_each_slot(o, [&](int r, std::int64_t local, std::int64_t g) {
    if (r != rank || g != global) return;
    o.ranks[static_cast<std::size_t>(r)][static_cast<std::size_t>(local)] = value;
    found = true;
  });
  SHARDSIM_ASSERT(found, "set_held: the rank does not hold that element");
}

double normwise_gap(const Observed& o) { return normwise_gap_to(o, o.dense); }

double normwise_gap_to(const Observed& o, const std::vector<double>& reference) {
  if (reference.empty()) return 0;
  double scale = 0;
  for (double d : reference) {
    if (std::isfinite(d)) scale = std::max(scale, std::fabs(d));
  }
  double worst = 0;
  for (const Held& h : held_elements(o)) {
    const double d = reference[static_cast<std::size_t>(h.global)];
    if (h.sharded == d) continue;
    const double gap = std::fabs(h.sharded - d);
    worst = std::max(worst, std::isfinite(gap) ? gap : INFINITY);
  }
  if (worst == 0) return 0;
  return scale > 0 ? worst / scale : INFINITY;
}

}  // namespace shardsim
