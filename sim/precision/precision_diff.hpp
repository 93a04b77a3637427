// shardsim precision: run one scenario at several precision levels and quantify, per boundary,
// how far each level is from the highest one and whether the sharded-vs-dense gap is rounding
// noise (non-associativity) or a semantic bug. docs/precisions.md ("Precision diff") documents the
// table.
//
// Per boundary and level L (levels sorted by significand bits; the top level T has the most):
//   error vs top   the oracle's value at L against T's value rounded once to L's type
//                  (correctly, mp -> f32 directly): max abs, max rel (|e| / |ref|) and max ULP
//                  in L's own type (ordered-integer mapping for f32/f64; |e| / ulp(ref) at mp).
//                  A boundary without an oracle value uses the ranks' values instead.
//   gap            the comparator's sharded-vs-dense metrics at L; `normwise` = max_abs / max|d|.
//                  At mp levels max_abs, max_rel and normwise are recomputed from the captured
//                  exact values, independently of the comparator (whose Magnitudes agree).
// Metrics that can go below the double range are Magnitudes (mantissa * 2^exponent).
// Verdict, in this order:
//   n/a     the boundary has no oracle counterpart;
//   exact   bitwise equal at every level;
//   bug     at some level the boundary claims exactness there (its inputs matched bitwise) and is
//           not bitwise equal, or a sharded value is not finite where the oracle is;
//   otherwise the trend of the gap along the ladder decides (precision/trend_fit.hpp):
//   noise, ill-conditioned noise, bug or undetermined.
//
// The reduce-order sweep reruns the scenario at f32 and f64 once per reduce order and reports,
// per boundary, how far the sharded values move from those of the first order listed (max ULP
// and normwise relative), and each order's gap against the oracle.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "compare/compare.hpp"
#include "core/magnitude.hpp"
#include "precision/trend_fit.hpp"

namespace shardsim {

struct PrecisionDiffOptions {
  std::vector<Precision> levels;           // any order; duplicates are an InputError
  std::vector<ReduceOrder> sweep_orders;   // empty: no sweep
  RunOptions run;                          // reduce order / schedule overrides for the levels
};

struct LevelMetrics {
  Magnitude max_abs;
  Magnitude max_rel;
  double max_ulp = 0;
};

struct LevelGap {
  Status status = Status::unchecked;
  Magnitude max_abs;
  Magnitude max_rel;
  double max_ulp = 0;
  Magnitude normwise;  // max_abs / max|dense| (0 when both are 0, inf when only max|d| is 0)
  // The boundary claims bitwise equality at this level (a claim holds only while its inputs
  // matched bitwise at this level, so it can differ between levels).
  bool exact_claimed = false;
};

struct BoundaryDiff {
  TraceEntry entry;
  std::vector<LevelMetrics> error;  // per level, in PrecisionDiff::levels order
  std::vector<LevelGap> gap;        // per level
  Verdict verdict = Verdict::not_applicable;
  std::string why;                  // one line, except for exact and n/a
  TrendFit trend;                   // the fit over the levels' normwise gaps
};

struct OrderSweepRow {
  int id = 0;
  std::string tensor;
  std::vector<double> spread_ulp;          // per sweep precision: max ULP vs the first order
  std::vector<double> spread_rel;          // per sweep precision: normwise relative
  std::vector<std::vector<double>> gap;    // [precision][order]: normwise gap vs the oracle
};

struct OrderSweep {
  std::vector<ReduceOrder> orders;
  std::vector<Precision> precisions;  // f32, f64
  std::vector<OrderSweepRow> rows;
};

struct PrecisionDiff {
  std::string scenario;
  std::vector<Precision> levels;           // ascending significand bits; the last is the top
  std::vector<unsigned> significand_bits;  // per level, as run
  ReduceOrder reduce_order = ReduceOrder::rank;
  std::vector<BoundaryDiff> boundaries;
  std::optional<OrderSweep> sweep;
  std::vector<RunReport> runs;  // per level, with captured tensors (for heatmaps)
};

// Throws InputError for an empty or duplicated level list.
PrecisionDiff precision_diff(const Scenario& scenario, const PrecisionDiffOptions& options);

// The terminal table and the JSON report of a PrecisionDiff are the report layer's
// (report/precision_report.hpp).

// |sharded - dense| over (row, column) for one boundary at one level: columns are the `hidden`
// axis (the last axis when there is none), rows every other axis in order (tokens, for
// [batch, seq, hidden]). Edges are where one rank's shard ends and the next begins.
struct Heatmap {
  int boundary = 0;
  std::string tensor;
  std::string level;
  std::string placement;
  std::string row_axes;     // "batch x seq"
  std::string column_axis;  // "hidden"
  std::int64_t rows = 0;
  std::int64_t columns = 0;
  std::vector<Magnitude> values;         // rows * columns, row-major; NaN where not compared
  std::vector<std::int64_t> row_edges;     // a line above these rows
  std::vector<std::int64_t> column_edges;  // a line left of these columns
  std::vector<std::string> row_labels;     // "b0 s12"
};

// The boundary named by "#ID", "ID" or a tensor name (its last boundary in the first step);
// nullopt when none matches.
std::optional<std::size_t> find_boundary(const PrecisionDiff& diff, std::string_view selector);
// The first divergent boundary, in trace order: the first `bug`; without one, the first
// `ill-conditioned noise`; without one, the first boundary with a nonzero gap at some level
// (nullopt when none has a gap). The HTML report opens on it.
std::optional<std::size_t> first_divergent_boundary(const PrecisionDiff& diff);
Heatmap make_heatmap(const PrecisionDiff& diff, std::size_t level, std::size_t boundary);

// The default ladder of `shardsim precision --levels`; diagnose reads the trend over it too.
inline constexpr const char* kDefaultLevels = "f32,f64,mp128,mp256";

namespace detail {
// The gap of boundary `b` at one level: the comparator's metrics, or at an mp level whose values
// were captured, the same recomputed from the exact captured texts (mp_exact_gap).
LevelGap level_gap(const Precision& level, unsigned bits, const BoundaryResult& b);
// Sets diff.verdict, diff.why and diff.trend from diff.gap. REQUIRES: levels ascending by
// `bits` (the significand bits each level ran with), one entry per level.
void judge_boundary(BoundaryDiff& diff, const std::vector<Precision>& levels,
                    const std::vector<unsigned>& bits);

// Exact mp arithmetic on captured "%Ra" texts (precision/diff_mp.cpp).
// Level values against the top values rounded once to `level_bits` significand bits.
LevelMetrics mp_level_error(const std::vector<std::string>& level,
                            const std::vector<std::string>& top, unsigned level_bits,
                            unsigned top_bits);
// |sum(addends, in order, each addition rounded to `bits`) - dense|, exact to 53 bits.
Magnitude mp_abs_gap(const std::vector<const std::string*>& addends, const std::string& dense,
                     unsigned bits);

// One element the comparator checks: its dense flat index and the (rank, local flat) addends it
// sums in rank order (one, unless the layout has Partial dims).
struct CompareSite {
  std::int64_t global = 0;
  std::vector<std::pair<int, std::int64_t>> addends;
};
// Every element the comparator visits for this boundary, in its order (compare.hpp).
std::vector<CompareSite> compare_sites(const TraceEntry& entry);
// The gap of an mp level recomputed exactly from captured texts: max_abs, max_rel and normwise
// as the comparator defines them (NaN never matches; an infinity only the same infinity).
LevelGap mp_exact_gap(const CapturedBoundary& captured, const std::vector<CompareSite>& sites,
                      unsigned bits);
}  // namespace detail

}  // namespace shardsim
