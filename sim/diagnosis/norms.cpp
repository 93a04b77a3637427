// norm_convention: LayerNorm / RMSNorm outputs recomputed under other statistics.
#include <algorithm>
#include <cmath>
#include <optional>

#include "diagnosis/signatures.hpp"
#include "diagnosis/format.hpp"

namespace shardsim {

namespace {

using diag::num;

enum class Pool { none, all_tokens, rank_tokens };
enum class Eps { inside, outside, none };

// One way to compute a row's statistics.
struct Convention {
  std::string text;
  bool center = true;     // subtract the mean (LayerNorm); false: RMSNorm
  bool unbiased = false;  // divide the sum of squares by n - 1
  Eps eps = Eps::inside;
  bool per_slice = false;           // statistics of each rank's slice of the normalized axis
  Pool pool = Pool::none;           // one mean shared by all tokens, or by each rank's tokens
  std::optional<double> eps_value;  // another eps inside the sqrt (else the specified one)
  bool pad_counted = false;         // per_slice: the slice's padding zeros counted as values
};

struct Stats {
  double mean = 0;
  double rstd = 0;
};

// The input seen as rows: x[(o, i, j)] with i along the normalized axis.
struct Rows {
  const NormCase& c;
  AxisView view;
  std::vector<Slice> slices;  // the input's slices of the normalized axis (per_slice)
  std::vector<int> owner;     // per row (o * inner + j): the rank holding it (rank_tokens)

  double x(std::int64_t row, std::int64_t i) const {
    const std::int64_t o = row / view.inner, j = row % view.inner;
    return c.x->dense[static_cast<std::size_t>(view.flat(o, i, j))];
  }
  double row_mean(std::int64_t row, std::int64_t lo, std::int64_t hi) const {
    double sum = 0;
    for (std::int64_t i = lo; i < hi; ++i) sum += x(row, i);
    return sum / static_cast<double>(hi - lo);
  }
};

Rows rows_of(const NormCase& c) {
  Rows rows{c, AxisView::of(c.x->entry.global, c.axis), {}, {}};
  const Placement& p = placement_1d(c.x->entry);
  const int ranks = static_cast<int>(c.x->ranks.size());
  if (p.is_shard() && p.axis == c.axis) {
    rows.slices = shard_slices(rows.view.extent, ranks, p.split);
  }
  for (std::int64_t row = 0; row < rows.view.outer * rows.view.inner; ++row) {
    int owner = 0;
    if (p.is_shard() && p.axis != c.axis) {
      const std::int64_t flat = rows.view.flat(row / rows.view.inner, 0, row % rows.view.inner);
      const AxisView token = AxisView::of(c.x->entry.global, p.axis);
      owner =
          owner_of(shard_slices(token.extent, ranks, p.split), (flat / token.inner) % token.extent);
    }
    rows.owner.push_back(owner);
  }
  return rows;
}

// The statistics a convention gives row `row` as rank `rank` sees it (its slice, its pool).
Stats stats_of(const Rows& rows, const Convention& k, std::int64_t row, int rank) {
  std::int64_t lo = 0, hi = rows.view.extent, pad = 0;
  if (k.per_slice && !rows.slices.empty()) {
    const Slice& slice = rows.slices[static_cast<std::size_t>(rank)];
    lo = slice.begin;
    hi = slice.end;
    pad = k.pad_counted ? slice.pad() : 0;  // zero-filled positions counted as values
  }
  const auto n = static_cast<double>(hi - lo + pad);
  Stats s;
  if (k.center && k.pool != Pool::none) {
    double sum = 0;
    int count = 0;
    for (std::int64_t r = 0; r < static_cast<std::int64_t>(rows.owner.size()); ++r) {
      if (k.pool == Pool::rank_tokens && rows.owner[static_cast<std::size_t>(r)] != rank) continue;
      sum += rows.row_mean(r, 0, rows.view.extent);
      ++count;
    }
    s.mean = sum / count;
  } else if (k.center) {
    s.mean = rows.row_mean(row, lo, hi) * static_cast<double>(hi - lo) / n;
  }
  double m2 = static_cast<double>(pad) * s.mean * s.mean;
  for (std::int64_t i = lo; i < hi; ++i)
    m2 += (rows.x(row, i) - s.mean) * (rows.x(row, i) - s.mean);
  const double var = m2 / (k.unbiased ? n - 1 : n);
  const double eps = k.eps_value.value_or(rows.c.eps);
  s.rstd = k.eps == Eps::inside    ? 1 / std::sqrt(var + eps)
           : k.eps == Eps::outside ? 1 / (std::sqrt(var) + eps)
                                   : 1 / std::sqrt(var);
  return s;
}

enum class Output { mean, rstd, y };

// The normwise residual of a convention against one failing output.
double residual(const Rows& rows, const Convention& k, const Observed& o, Output what) {
  double scale = 0, worst = 0;
  for (const Held& h : held_elements(o)) {
    std::int64_t row = h.global, i = 0;
    if (what == Output::y) {
      const std::int64_t outer = h.global / (rows.view.extent * rows.view.inner);
      i = (h.global / rows.view.inner) % rows.view.extent;
      row = outer * rows.view.inner + h.global % rows.view.inner;
    }
    int rank = h.rank;
    if (what == Output::y && !rows.slices.empty()) rank = owner_of(rows.slices, i);
    if (k.pool == Pool::rank_tokens) rank = rows.owner[static_cast<std::size_t>(row)];
    const Stats s = stats_of(rows, k, row, rank);
    double predicted = what == Output::mean ? s.mean : s.rstd;
    if (what == Output::y) {
      predicted = (rows.x(row, i) - s.mean) * s.rstd;
      if (!rows.c.weight.empty()) predicted *= rows.c.weight[static_cast<std::size_t>(i)];
      if (!rows.c.bias.empty()) predicted += rows.c.bias[static_cast<std::size_t>(i)];
    }
    scale = std::max(scale, std::fabs(predicted));
    worst = std::max(worst, std::fabs(h.sharded - predicted));
  }
  return scale > 0 ? worst / scale : worst;
}

// The eps that the sharded rstd implies, 1/rstd^2 - var, when every row implies the same one
// (relative spread 1e-6) and it is not the specified eps: a different eps value.
std::optional<double> fitted_eps(const NormCase& c) {
  if (!c.rstd) return std::nullopt;
  const Rows rows = rows_of(c);
  const Convention spec{"", !c.rms};
  std::vector<double> implied;
  for (const Held& h : held_elements(*c.rstd)) {
    const Stats s = stats_of(rows, spec, h.global, h.rank);
    const double var = 1 / (s.rstd * s.rstd) - c.eps;
    implied.push_back(1 / (h.sharded * h.sharded) - var);
  }
  if (implied.empty()) return std::nullopt;
  std::sort(implied.begin(), implied.end());
  const double eps = implied[implied.size() / 2];
  if (!(eps >= 0) || diag::rel(eps, c.eps) < 1e-3) return std::nullopt;
  for (double e : implied) {
    if (std::fabs(e - eps) > 1e-6 * std::max(eps, 1e-300) + 1e-12) return std::nullopt;
  }
  return eps;
}

std::vector<Convention> alternatives(const NormCase& c) {
  const std::string h = "H = " + std::to_string(c.x->entry.global.extent(c.axis));
  std::vector<Convention> out{
      {"the variance divided by H - 1 (unbiased, factor H/(H-1), " + h + ")", !c.rms, true},
      {c.rms ? "LayerNorm's statistic (mean subtracted) where RMSNorm is specified"
             : "RMSNorm's statistic (no mean subtracted) where LayerNorm is specified",
       c.rms},
      {"eps outside the sqrt: 1/(sqrt(var) + eps)", !c.rms, false, Eps::outside},
      {"no eps: 1/sqrt(var)", !c.rms, false, Eps::none},
      {"each rank's slice of " + c.axis + " alone (local instead of global statistics)", !c.rms,
       false, Eps::inside, true}};
  const Placement& placement = placement_1d(c.x->entry);
  if (placement.is_shard() && placement.axis == c.axis && placement.split == SplitPolicy::padded) {
    Convention padded{
        "each rank's padded slice of " + c.axis +
            " alone, its padding zeros counted (local statistics, padding not masked)",
        !c.rms, false, Eps::inside, true};
    padded.pad_counted = true;
    out.push_back(padded);
  }
  if (const std::optional<double> eps = fitted_eps(c)) {
    out.push_back({"eps = " + num(*eps) + " inside the sqrt instead of " + num(c.eps), !c.rms,
                   false, Eps::inside, false, Pool::none, *eps});
  }
  if (!c.rms) {
    out.push_back({"one mean pooled over all tokens instead of each token's own", true, false,
                   Eps::inside, false, Pool::all_tokens});
    out.push_back({"one mean pooled over each rank's tokens", true, false, Eps::inside, false,
                   Pool::rank_tokens});
  }
  return out;
}

// Where an eps gap concentrates: the mean relative rstd gap over the lower- and the
// higher-variance half of the rows.
std::string eps_concentration(const Rows& rows, const Observed& rstd) {
  std::vector<std::pair<double, double>> by_var;  // (variance, relative gap)
  const Convention spec{"", !rows.c.rms};
  for (const Held& h : held_elements(rstd)) {
    const double d = rstd.dense[static_cast<std::size_t>(h.global)];
    const double var = 1 / (stats_of(rows, spec, h.global, h.rank).rstd *
                            stats_of(rows, spec, h.global, h.rank).rstd);
    by_var.emplace_back(var, diag::rel(h.sharded, d));
  }
  std::sort(by_var.begin(), by_var.end());
  double low = 0, high = 0;
  const std::size_t half = by_var.size() / 2;
  for (std::size_t i = 0; i < by_var.size(); ++i) (i < half ? low : high) += by_var[i].second;
  if (half == 0) return "";
  return "; relative rstd gap " + num(low / half) + " in the lower-variance half of the rows vs " +
         num(high / (by_var.size() - half)) + " in the higher";
}

}  // namespace

Finding norm_convention(const NormCase& c, double unit) {
  Finding f{.signature = "norm_convention", .cause = Cause::normalization_convention};
  if (!c.x || c.x->dense.empty() || !c.x->entry.global.has(c.axis) ||
      (!c.mean && !c.rstd && !c.y)) {
    f.evidence = "n/a: not a failing normalization output with its input";
    return f;
  }
  const Rows rows = rows_of(c);
  auto worst = [&](const Convention& k) {
    double r = 0;
    if (c.mean) r = std::max(r, residual(rows, k, *c.mean, Output::mean));
    if (c.rstd) r = std::max(r, residual(rows, k, *c.rstd, Output::rstd));
    if (c.y) r = std::max(r, residual(rows, k, *c.y, Output::y));
    return r;
  };
  const double spec = worst(Convention{"", !c.rms});
  const double tolerance = kFitUlps * unit;
  std::string outputs;
  for (const Observed* o : {c.mean, c.rstd, c.y}) {
    if (o) outputs += (outputs.empty() ? "" : ", ") + o->entry.tensor;
  }
  if (spec <= tolerance) {
    f.evidence =
        "the specified statistic reproduces " + outputs + " within rounding (" + num(spec) + ")";
    return f;
  }
  for (const Convention& k : alternatives(c)) {
    const double fit = worst(k);
    if (fit > tolerance || fit * 16 > spec) continue;
    f.confidence = 0.95;
    f.evidence = "recomputed with " + k.text + ", the statistics reproduce " + outputs +
                 " (residual " + num(fit) + "); the specified statistic is " + num(spec) + " away";
    if ((k.eps != Eps::inside || k.eps_value) && c.rstd) {
      f.evidence += eps_concentration(rows, *c.rstd);
    }
    return f;
  }
  f.evidence = "no other statistic reproduces " + outputs + " (specified: " + num(spec) + " away)";
  return f;
}

}  // namespace shardsim
