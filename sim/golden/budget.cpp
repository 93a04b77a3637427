// Error budgets of correct narrow programs (budget.hpp): the runs, and the gap of each program
// from each BF16/F16 golden tensor.
#include "golden/budget.hpp"

#include <cmath>
#include <limits>

#include "core/error.hpp"
#include "golden/golden_set.hpp"
#include "precision/precision_diff.hpp"

namespace shardsim {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::optional<NarrowFormat> narrow_of(format::Dtype dtype) {
  if (dtype == format::Dtype::bf16) return NarrowFormat::bf16;
  if (dtype == format::Dtype::f16) return NarrowFormat::f16;
  return std::nullopt;
}

// One correct program's gap from every entry of `format`, widening `out`.
void measure_run(NarrowFormat format, const RunReport& run, const RunReport& reference,
                 const std::vector<GoldenEntry>& entries,
                 std::vector<std::optional<TensorBudget>>& out) {
  SHARDSIM_ASSERT(run.boundaries.size() == reference.boundaries.size(),
                  "a narrow run records the reference run's boundaries");
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const GoldenEntry& entry = entries[i];
    if (narrow_of(entry.tensor.dtype) != format) continue;
    const BoundaryResult& b = run.boundaries[entry.boundary];
    const TraceEntry& want = reference.boundaries[entry.boundary].entry;
    SHARDSIM_ASSERT(b.entry.id == want.id && b.entry.tensor == want.tensor,
                    "a narrow run records the reference run's boundaries, in order");
    const CapturedBoundary& captured = *b.captured;
    GapMeter meter(format, raw_values(entry.tensor));
    if (entry.rank >= 0) {
      const std::vector<double>& local = captured.ranks[static_cast<std::size_t>(entry.rank)].f64;
      for (std::size_t e = 0; e < local.size(); ++e)
        meter.add(static_cast<std::int64_t>(e), local[e]);
    } else {
      for (std::size_t e = 0; e < captured.dense.f64.size(); ++e)
        meter.add(static_cast<std::int64_t>(e), captured.dense.f64[e]);
      for (const detail::CompareSite& site : detail::compare_sites(b.entry)) {
        double sum = 0;  // a Partial value: its addends in rank order (one addend otherwise)
        for (const auto& [rank, local] : site.addends)
          sum += captured.ranks[static_cast<std::size_t>(rank)].f64[static_cast<std::size_t>(local)];
        meter.add(site.global, sum);
      }
    }
    out[i] = out[i] ? widest(*out[i], meter.gap()) : meter.gap();
  }
}

}  // namespace

TensorBudget widest(const TensorBudget& a, const TensorBudget& b) {
  return {std::max(a.normwise, b.normwise), std::max(a.ulp, b.ulp)};
}

double allowed_normwise(NarrowFormat format, double budget) {
  return 2 * budget + std::ldexp(1.0, 1 - narrow_info(format).significand_bits);
}

GapMeter::GapMeter(NarrowFormat format, std::vector<double> golden)
    : format_(format), golden_(std::move(golden)) {
  for (double g : golden_) {
    if (std::isfinite(g)) scale_ = std::max(scale_, std::fabs(g));
  }
}

void GapMeter::add(std::int64_t index, double program) {
  const double g = golden_.at(static_cast<std::size_t>(index));
  if (std::isnan(g) || std::isnan(program)) {
    max_abs_ = max_ulp_ = kInf;
    return;
  }
  if (std::isinf(g) || std::isinf(program)) {
    if (g != program) max_abs_ = max_ulp_ = kInf;
    return;
  }
  max_abs_ = std::max(max_abs_, std::fabs(program - g));
  const std::uint64_t ulp = narrow_ulp_distance(format_, narrow_from_double(format_, program),
                                                narrow_from_double(format_, g));
  max_ulp_ = std::max(max_ulp_, static_cast<double>(ulp));
}

TensorBudget GapMeter::gap() const {
  if (max_abs_ == 0) return {0, max_ulp_};
  return {scale_ > 0 ? max_abs_ / scale_ : kInf, max_ulp_};
}

GoldenBudgets compute_budgets(const Scenario& scenario, const RunReport& reference,
                              const std::vector<GoldenEntry>& entries,
                              const BudgetPrograms& programs) {
  GoldenBudgets out;
  out.programs = programs;
  out.per_entry.resize(entries.size());
  for (NarrowFormat format : {NarrowFormat::bf16, NarrowFormat::f16}) {
    std::optional<std::string>& unavailable =
        format == NarrowFormat::bf16 ? out.bf16_unavailable : out.f16_unavailable;
    const bool present = std::any_of(entries.begin(), entries.end(), [&](const GoldenEntry& e) {
      return narrow_of(e.tensor.dtype) == format;
    });
    if (!present) continue;
    if (!scenario.faults.empty()) {
      std::string names;
      for (const std::string& name : scenario.fault_names()) names += (names.empty() ? "" : ", ") + name;
      unavailable = "the scenario has faults (" + names +
                    "): its sharded program is a seeded bug, not a correct program; write the "
                    "goldens of its clean twin";
      continue;
    }
    const Precision precision = parse_precision(format == NarrowFormat::bf16 ? "bf16" : "f16");
    std::vector<std::optional<TensorBudget>> budgets(entries.size());
    try {
      for (ReduceOrder order : programs.reduce_orders) {
        for (const Schedule& schedule : programs.schedules) {
          RunOptions options;
          options.reduce_order = order;
          options.schedule = schedule;
          options.accumulate = Accumulate::f32;
          options.capture_tensors = true;
          measure_run(format, evaluate(scenario, precision, options), reference, entries, budgets);
        }
      }
    } catch (const InputError& e) {
      unavailable = std::string(precision.name()) + " runs are refused: " + e.what();
      continue;
    }
    for (std::size_t i = 0; i < entries.size(); ++i) {
      if (budgets[i]) out.per_entry[i] = budgets[i];
    }
  }
  return out;
}

}  // namespace shardsim
