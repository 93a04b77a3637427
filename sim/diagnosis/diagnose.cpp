// The diagnosis orchestrator: replays the failing run with capture, measures every signature at
// the analysed boundary, reads the trend over precisions and ranks the causes (diagnosis.hpp).
#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "diagnosis/context.hpp"

namespace shardsim {

namespace {

// The precisions of the trend, beside the ones the replay ran: those `shardsim precision` reads
// by default (kDefaultLevels), so that the two judge the same ladder.
std::vector<Precision> trend_levels() {
  std::vector<Precision> out;
  std::string list = kDefaultLevels;
  for (std::size_t at = 0; at <= list.size();) {
    const std::size_t comma = std::min(list.find(',', at), list.size());
    out.push_back(parse_precision(list.substr(at, comma - at)));
    at = comma + 1;
  }
  return out;
}

// The most values an mp analysis run captures (each with its f32, f64 and exact text).
constexpr std::int64_t kMaxMpCapture = std::int64_t{1} << 20;

// The values a capture of `run` holds: every boundary's oracle tensor and every rank's local one.
std::int64_t captured_values(const RunReport& run) {
  std::int64_t total = 0;
  for (const BoundaryResult& b : run.boundaries) {
    total += b.entry.global.numel();
    for (const RankExtent& r : b.entry.ranks) total += r.local_shape.numel();
  }
  return total;
}

TrendPoint trend_point(const RunReport& run, int id) {
  const BoundaryResult& b = run.boundaries[static_cast<std::size_t>(id)];
  return {run.precision, run.significand_bits,
          detail::level_gap(run.precision, run.significand_bits, b)};
}

std::vector<TrendPoint> trend(const Scenario& scenario, const std::vector<RunReport>& known,
                              const RunOptions& options, int id) {
  std::vector<TrendPoint> points;
  std::vector<std::string> done;
  auto add = [&](const RunReport& run) {
    if (std::find(done.begin(), done.end(), run.precision.name()) != done.end()) return;
    if (static_cast<int>(run.boundaries.size()) <= id) return;
    done.push_back(run.precision.name());
    points.push_back(trend_point(run, id));
  };
  for (const RunReport& run : known) add(run);
  RunOptions plain = options;
  plain.capture_tensors = false;
  for (const Precision& precision : trend_levels()) {
    if (std::find(done.begin(), done.end(), precision.name()) != done.end()) continue;
    try {
      add(evaluate(scenario, precision, plain));
    } catch (const InputError&) {
      // Refused (over the memory limit, or an oracle not finite at that level): the trend has
      // one level fewer.
    }
  }
  return points;
}

std::vector<Finding> measure(diag::Context& ctx, int id, const std::vector<TrendPoint>& points) {
  const Observed& o = ctx.observed(id);
  const double unit = ctx.unit();
  std::vector<TraceStatus> statuses;
  for (const BoundaryResult& b : ctx.run().boundaries) {
    statuses.push_back(
        {b.entry.id, b.entry.step, b.entry.chunk, b.entry.op, b.entry.tensor, b.status});
  }
  return {constant_ratio(o, diag::program_counts(ctx.scenario()), unit),
          constant_fill(o),
          hidden_cast(o, ctx.run().significand_bits),
          diag::replica_signature(ctx, id),
          diag::mask_signature(ctx, id),
          rank_offset_gap(o),
          shard_edge_gap(o),
          shifted_copy(o, unit),
          diag::rope_signature(ctx, id),
          diag::window_signature(ctx, id),
          diag::ring_signature(ctx, id),
          chunk_onset(statuses, id),
          diag::provenance_signature(ctx, id),
          diag::norm_signature(ctx, id),
          diag::loss_signature(ctx, id),
          diag::optimizer_signature(ctx, id),
          diag::kv_group_signature(ctx, id),
          diag::unreduced_share_signature(ctx, id),
          diag::vocab_signature(ctx, id),
          diag::tied_uses_signature(ctx, id),
          precision_trend(points)};
}

// Up to kMaxCauses findings, one per cause, most confident first (ties: signature order).
// A gap that vanishes with precision makes every bug less likely.
std::vector<Finding> rank_causes(std::vector<Finding> findings) {
  const bool rounding = std::any_of(findings.begin(), findings.end(), [](const Finding& f) {
    return f.cause == Cause::rounding && f.present();
  });
  if (rounding) {
    for (Finding& f : findings) {
      if (f.cause != Cause::rounding) f.confidence *= 0.5;
    }
  }
  std::stable_sort(findings.begin(), findings.end(),
                   [](const Finding& a, const Finding& b) { return a.confidence > b.confidence; });
  std::vector<Finding> causes;
  for (const Finding& f : findings) {
    if (causes.size() == kMaxCauses || f.confidence < 0.3) break;
    const bool named = std::any_of(causes.begin(), causes.end(),
                                   [&](const Finding& c) { return c.cause == f.cause; });
    if (!named) causes.push_back(f);
  }
  return causes;
}

Diagnosis analyse(const Scenario& scenario, RunReport captured, int id,
                  const std::vector<TrendPoint>& points) {
  Diagnosis d;
  d.analysed = true;
  d.precision = captured.precision;
  d.boundary = id;
  diag::Context ctx(scenario, std::move(captured));
  const TraceEntry& e = ctx.entry(id);
  d.where = where_label(e.step, e.micro, e.micro_count, e.chunk) + " boundary #" +
            std::to_string(e.id) + " " + e.op + " -> " + e.tensor;
  d.findings = measure(ctx, id, points);
  d.causes = rank_causes(d.findings);
  return d;
}

}  // namespace

Diagnosis diagnose(const Scenario& scenario, const std::vector<RunReport>& reports,
                   const RunOptions& options) {
  const RunReport* failed = earliest_failure(reports);  // judge's first divergence
  if (!failed || !failed->first_divergence) return {};
  if (scenario.mesh.devices.ndim() != 1) return {};  // the signatures read 1-D placements
  const int id = failed->first_divergence->boundary;
  RunOptions capture = options;
  capture.reduce_order = failed->reduce_order;
  capture.schedule = failed->schedule;
  const std::vector<TrendPoint> points = trend(scenario, reports, capture, id);
  // Values are read in double: analyse at the most precise level where the boundary still
  // fails, so that recomputed alternatives are told apart at 2^-53 rather than through the
  // failing level's own rounding (a bug persists to mp; rounding noise does not).
  // An mp capture also keeps every value's exact text: above kMaxMpCapture values the analysis
  // stays at f64 or below.
  Precision analysed = failed->precision;
  unsigned bits = failed->significand_bits;
  const unsigned most_bits = captured_values(*failed) > kMaxMpCapture ? 53 : ~0u;
  for (const TrendPoint& p : points) {
    if (p.gap.status == Status::fail && p.bits > bits && p.bits <= most_bits) {
      analysed = p.precision;
      bits = p.bits;
    }
  }
  capture.capture_tensors = true;
  return analyse(scenario, evaluate(scenario, analysed, capture), id, points);
}

Diagnosis diagnose_boundary(const Scenario& scenario, const Precision& precision,
                            const RunOptions& options, int boundary) {
  RunOptions capture = options;
  capture.capture_tensors = true;
  RunReport run = evaluate(scenario, precision, capture);
  if (boundary < 0 || boundary >= static_cast<int>(run.boundaries.size())) {
    throw InputError("--diagnose: no boundary #" + std::to_string(boundary) + " (the trace has " +
                     std::to_string(run.boundaries.size()) + ")");
  }
  const std::vector<TrendPoint> points = trend(scenario, {run}, options, boundary);
  return analyse(scenario, std::move(run), boundary, points);
}

}  // namespace shardsim
