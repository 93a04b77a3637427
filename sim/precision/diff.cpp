// shardsim precision: the runs, the per-boundary metrics and verdicts, the reduce-order sweep and
// the heatmap data. Rendering lives in the report layer: report/precision_report.cpp (text, JSON)
// and report/html_report.cpp.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <set>

#include "core/error.hpp"
#include "core/narrow.hpp"
#include "precision/precision_diff.hpp"

namespace shardsim {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The values an "error vs top" comparison uses: the oracle's, or the ranks' concatenated when the
// boundary has no oracle counterpart.
CapturedValues reference_values(const CapturedBoundary& captured) {
  if (captured.has_dense) return captured.dense;
  CapturedValues out;
  for (const CapturedValues& rank : captured.ranks) {
    out.f32.insert(out.f32.end(), rank.f32.begin(), rank.f32.end());
    out.f64.insert(out.f64.end(), rank.f64.begin(), rank.f64.end());
    out.exact.insert(out.exact.end(), rank.exact.begin(), rank.exact.end());
  }
  return out;
}

// Level values `a` against reference values `b`, both already in the level's IEEE type.
template <typename F>
LevelMetrics ieee_error(const std::vector<F>& a, const std::vector<F>& b) {
  LevelMetrics out;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double ulp = static_cast<double>(ulp_distance(a[i], b[i]));
    const double x = a[i];
    const double y = b[i];
    double abs_err, rel_err;
    if (std::isnan(x) || std::isnan(y)) {
      abs_err = rel_err = kInf;
    } else if (std::isinf(x) || std::isinf(y)) {
      abs_err = rel_err = x == y ? 0.0 : kInf;
    } else {
      abs_err = std::fabs(x - y);
      rel_err = abs_err == 0 ? 0.0 : (y == 0 ? kInf : abs_err / std::fabs(y));
    }
    out.max_abs = max(out.max_abs, Magnitude::of(abs_err));
    out.max_rel = max(out.max_rel, Magnitude::of(rel_err));
    out.max_ulp = std::max(out.max_ulp, ulp == static_cast<double>(kUlpNaN) ? kInf : ulp);
  }
  return out;
}

// A narrow level: its values and the reference's, each rounded once to the format (bit
// patterns), with ULPs counted in the format.
LevelMetrics narrow_error(NarrowFormat format, const std::vector<std::uint16_t>& a,
                          const std::vector<std::uint16_t>& b) {
  std::vector<float> x(a.size()), y(b.size());
  for (std::size_t i = 0; i < a.size(); ++i) x[i] = narrow_to_float(format, a[i]);
  for (std::size_t i = 0; i < b.size(); ++i) y[i] = narrow_to_float(format, b[i]);
  LevelMetrics out = ieee_error(x, y);
  out.max_ulp = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const std::uint64_t ulp = narrow_ulp_distance(format, a[i], b[i]);
    out.max_ulp = std::max(out.max_ulp, ulp == UINT64_MAX ? kInf : static_cast<double>(ulp));
  }
  return out;
}

LevelMetrics level_error(const Precision& level, unsigned level_bits, const CapturedValues& values,
                         const CapturedValues& top, unsigned top_bits) {
  switch (level.kind) {
    case ScalarKind::bf16:
      return narrow_error(NarrowFormat::bf16, values.bf16, top.bf16);
    case ScalarKind::f16:
      return narrow_error(NarrowFormat::f16, values.f16, top.f16);
    case ScalarKind::f32:
      return ieee_error(values.f32, top.f32);
    case ScalarKind::f64:
      return ieee_error(values.f64, top.f64);
    case ScalarKind::mp:
    case ScalarKind::dd:
    case ScalarKind::qd:
      return detail::mp_level_error(values.exact, top.exact, level_bits, top_bits);
  }
  return {};
}

}  // namespace

// The comparator's metrics are Magnitudes, exact at every level; at an mp level with captured
// values they are recomputed independently from the exact texts (they agree:
// tests/precision_ladder_test.cpp). A run captured for goldens alone kept no texts (a `run
// --golden` report that the diagnosis reuses): its comparator metrics serve.
LevelGap detail::level_gap(const Precision& level, unsigned bits, const BoundaryResult& b) {
  LevelGap gap;
  if (level.has_exact_values() && b.captured && b.captured->has_dense && b.captured->exact_text) {
    gap = detail::mp_exact_gap(*b.captured, detail::compare_sites(b.entry), bits);
  } else {
    gap.max_abs = b.max_abs;
    gap.max_rel = b.max_rel;
    if (!b.max_abs.is_zero()) gap.normwise = b.max_abs / b.scale;  // inf when the scale is 0
  }
  gap.status = b.status;
  gap.max_ulp = b.max_ulp;
  gap.exact_claimed = b.entry.exact;
  return gap;
}

void detail::judge_boundary(BoundaryDiff& diff, const std::vector<Precision>& levels,
                            const std::vector<unsigned>& bits) {
  diff.why.clear();
  if (std::all_of(diff.gap.begin(), diff.gap.end(),
                  [](const LevelGap& g) { return g.status == Status::unchecked; })) {
    diff.verdict = Verdict::not_applicable;
    return;
  }
  if (std::all_of(diff.gap.begin(), diff.gap.end(),
                  [](const LevelGap& g) { return g.status == Status::exact; })) {
    diff.verdict = Verdict::exact;
    return;
  }
  std::vector<LadderPoint> points;
  for (std::size_t l = 0; l < levels.size(); ++l) {
    points.push_back({levels[l].name(), bits[l], diff.gap[l].normwise});
  }
  diff.trend = fit_trend(points);
  diff.verdict = Verdict::bug;
  for (std::size_t l = 0; l < levels.size(); ++l) {
    if (diff.gap[l].exact_claimed && diff.gap[l].status != Status::exact) {
      diff.why = "claims exactness but is not bitwise equal at " + levels[l].name();
      return;
    }
  }
  for (std::size_t l = 0; l < levels.size(); ++l) {
    // The oracle is finite at every level (the runner refuses one that is not), so a sharded
    // value that is not finite is an overflow or an undefined operation of the sharded program
    // at that level: a range bug of that format, which rounding at the same precision does not
    // explain even when wider formats agree.
    if (!diff.gap[l].max_abs.is_finite()) {
      diff.why = "not finite at " + levels[l].name() +
                 " where the oracle is finite (overflow or an undefined operation)";
      return;
    }
  }
  const TrendVerdict judged = judge_trend(points, diff.trend);
  diff.verdict = judged.verdict;
  diff.why = judged.why;
}

namespace {

// Under fsdp mixed precision (param_dtype, reduce_dtype) a declared dtype no wider than any
// level rounds at every level (or the level itself rounds as coarsely), so the gap cannot shrink
// along the ladder: a flat trend is that dtype's rounding, noise when every level is within its
// tolerance (Scenario::rtol, which the dtype sets), a bug only where a level fails.
void judge_declared_dtype(const Scenario& scenario, const std::vector<Precision>& levels,
                          BoundaryDiff& row) {
  if (row.verdict != Verdict::bug || !scenario.fsdp || !row.why.starts_with("flat")) return;
  std::optional<Precision> narrowest;
  for (const auto& dtype : {scenario.fsdp->param_dtype, scenario.fsdp->reduce_dtype}) {
    if (dtype && (!narrowest || dtype->bits < narrowest->bits)) narrowest = dtype;
  }
  if (!narrowest) return;
  for (std::size_t l = 0; l < levels.size(); ++l) {
    if (narrowest->bits > levels[l].bits || row.gap[l].status == Status::fail) return;
  }
  row.verdict = Verdict::noise;
  row.why = "flat at the declared fsdp dtype " + narrowest->name() +
            ", which rounds at every level; within its tolerance at every level (" + row.why + ")";
}

RunReport captured_run(const Scenario& scenario, const Precision& precision, RunOptions options) {
  options.capture_tensors = true;
  options.capture_exact = true;  // the ladder's gaps are computed from the texts
  check_memory(scenario, precision, options);
  return evaluate(scenario, precision, options);
}

void check_aligned(const RunReport& a, const RunReport& b) {
  SHARDSIM_ASSERT(a.boundaries.size() == b.boundaries.size(),
                  "runs at different precisions recorded different boundaries");
  for (std::size_t i = 0; i < a.boundaries.size(); ++i) {
    SHARDSIM_ASSERT(a.boundaries[i].entry.tensor == b.boundaries[i].entry.tensor &&
                        a.boundaries[i].entry.op == b.boundaries[i].entry.op,
                    "runs at different precisions recorded different boundaries");
  }
}

// Sharded values of run `a` against run `b` (same precision): max ULP and normwise relative.
std::pair<double, double> sharded_spread(const CapturedBoundary& a, const CapturedBoundary& b,
                                         bool f32) {
  double max_ulp = 0, max_abs = 0, scale = 0;
  for (std::size_t r = 0; r < a.ranks.size(); ++r) {
    const std::vector<double>& x = a.ranks[r].f64;
    const std::vector<double>& y = b.ranks[r].f64;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double ulp =
          f32 ? static_cast<double>(ulp_distance(a.ranks[r].f32[i], b.ranks[r].f32[i]))
              : static_cast<double>(ulp_distance(x[i], y[i]));
      max_ulp = std::max(max_ulp, ulp == static_cast<double>(kUlpNaN) ? kInf : ulp);
      const double diff = std::fabs(x[i] - y[i]);
      max_abs = std::max(max_abs, std::isnan(diff) ? kInf : diff);
      if (std::isfinite(y[i])) scale = std::max(scale, std::fabs(y[i]));
    }
  }
  const double rel = max_abs == 0 ? 0.0 : (scale > 0 ? max_abs / scale : kInf);
  return {max_ulp, rel};
}

OrderSweep run_sweep(const Scenario& scenario, const PrecisionDiffOptions& options) {
  OrderSweep sweep;
  sweep.orders = options.sweep_orders;
  sweep.precisions = {parse_precision("f32"), parse_precision("f64")};
  std::vector<std::vector<RunReport>> runs(sweep.precisions.size());
  for (std::size_t p = 0; p < sweep.precisions.size(); ++p) {
    for (ReduceOrder order : sweep.orders) {
      RunOptions run = options.run;
      run.reduce_order = order;
      runs[p].push_back(captured_run(scenario, sweep.precisions[p], run));
      check_aligned(runs[p].front(), runs[p].back());
    }
  }
  const RunReport& first = runs[0][0];
  for (std::size_t b = 0; b < first.boundaries.size(); ++b) {
    OrderSweepRow row;
    row.id = first.boundaries[b].entry.id;
    row.tensor = first.boundaries[b].entry.tensor;
    for (std::size_t p = 0; p < sweep.precisions.size(); ++p) {
      double ulp = 0, rel = 0;
      std::vector<double> gaps;
      for (std::size_t o = 0; o < sweep.orders.size(); ++o) {
        const auto [u, r] = sharded_spread(*runs[p][o].boundaries[b].captured,
                                           *runs[p][0].boundaries[b].captured, p == 0);
        ulp = std::max(ulp, u);
        rel = std::max(rel, r);
        gaps.push_back(detail::level_gap(sweep.precisions[p], 0, runs[p][o].boundaries[b])
                           .normwise.to_double());
      }
      row.spread_ulp.push_back(ulp);
      row.spread_rel.push_back(rel);
      row.gap.push_back(std::move(gaps));
    }
    sweep.rows.push_back(std::move(row));
  }
  return sweep;
}

}  // namespace

PrecisionDiff precision_diff(const Scenario& scenario, const PrecisionDiffOptions& options) {
  if (options.levels.empty()) throw InputError("--levels needs at least one precision");
  PrecisionDiff diff;
  diff.scenario = scenario.name;
  diff.levels = options.levels;
  std::stable_sort(diff.levels.begin(), diff.levels.end(),
                   [](const Precision& a, const Precision& b) { return a.bits < b.bits; });
  for (std::size_t l = 1; l < diff.levels.size(); ++l) {
    if (diff.levels[l].bits == diff.levels[l - 1].bits) {
      throw InputError("--levels lists " + diff.levels[l].name() + " twice");
    }
  }
  std::set<ReduceOrder> orders;
  for (ReduceOrder order : options.sweep_orders) {
    if (!orders.insert(order).second) {
      throw InputError(std::string("--reduce-order lists '") +
                       std::string(reduce_order_name(order)) + "' twice");
    }
  }
  // Refuse oversized runs before any starts.
  for (const Precision& level : diff.levels) check_memory(scenario, level, options.run);
  for (const Precision& level : diff.levels) {
    diff.runs.push_back(captured_run(scenario, level, options.run));
    diff.significand_bits.push_back(diff.runs.back().significand_bits);
    check_aligned(diff.runs.front(), diff.runs.back());
  }
  diff.reduce_order = diff.runs.front().reduce_order;
  const std::size_t top = diff.levels.size() - 1;
  for (std::size_t b = 0; b < diff.runs[top].boundaries.size(); ++b) {
    BoundaryDiff row;
    row.entry = diff.runs[top].boundaries[b].entry;
    const CapturedValues top_values = reference_values(*diff.runs[top].boundaries[b].captured);
    for (std::size_t l = 0; l < diff.levels.size(); ++l) {
      const BoundaryResult& result = diff.runs[l].boundaries[b];
      row.error.push_back(level_error(diff.levels[l], diff.significand_bits[l],
                                      reference_values(*result.captured), top_values,
                                      diff.significand_bits[top]));
      row.gap.push_back(detail::level_gap(diff.levels[l], diff.significand_bits[l], result));
    }
    detail::judge_boundary(row, diff.levels, diff.significand_bits);
    judge_declared_dtype(scenario, diff.levels, row);
    diff.boundaries.push_back(std::move(row));
  }
  if (!options.sweep_orders.empty()) diff.sweep = run_sweep(scenario, options);
  return diff;
}

std::optional<std::size_t> find_boundary(const PrecisionDiff& diff, std::string_view selector) {
  std::string_view id = selector;
  if (!id.empty() && id.front() == '#') id.remove_prefix(1);
  if (!id.empty() && std::all_of(id.begin(), id.end(), [](char c) {
        return std::isdigit(static_cast<unsigned char>(c));
      })) {
    for (std::size_t b = 0; b < diff.boundaries.size(); ++b) {
      if (std::to_string(diff.boundaries[b].entry.id) == id) return b;
    }
    return std::nullopt;
  }
  std::optional<std::size_t> found;
  for (std::size_t b = 0; b < diff.boundaries.size(); ++b) {
    const TraceEntry& e = diff.boundaries[b].entry;
    if (e.tensor == selector && (!found || diff.boundaries[*found].entry.step == e.step)) found = b;
  }
  return found;
}

std::optional<std::size_t> first_divergent_boundary(const PrecisionDiff& diff) {
  for (Verdict wanted : {Verdict::bug, Verdict::ill_conditioned_noise}) {
    for (std::size_t b = 0; b < diff.boundaries.size(); ++b) {
      if (diff.boundaries[b].verdict == wanted) return b;
    }
  }
  for (std::size_t b = 0; b < diff.boundaries.size(); ++b) {
    for (const LevelGap& gap : diff.boundaries[b].gap) {
      if (!gap.normwise.is_zero()) return b;
    }
  }
  return std::nullopt;
}

}  // namespace shardsim
