// Error budgets of correct narrow programs (docs/goldens.md "Error budgets"): for every BF16 or F16
// golden tensor, the largest gap between the golden (the reference rounded once to the format) and
// the values of the correct programs shardsim can run at that precision. `compare --precision`
// judges a backend's tensors against them: noise or bug.
//
// The correct programs, per format, with accumulate = f32 (storage.hpp; accumulate = storage is
// not a correct program: it models a known class of bugs):
//   the dense oracle, and the sharded program in each reduce order (rank, ring, tree) under the
//   schedules rank and reverse. The schedule never changes a value (invariant 4; the scheduler
//   test replays the bundled scenarios under every schedule), so the second schedule confirms
//   rather than widens; a shuffle visits the ranks in yet another order, with the same values.
// A global golden is measured against the oracle's tensor and against the sharded program's
// values at every element the comparator visits (compare.hpp: a Partial value is the sum of its
// addends in rank order, in double; padding is skipped; every Replicate copy counts); a shard
// golden against that rank's local tensor.
//
// The gap of values p from a golden g, as `compare` measures a candidate:
//   normwise = max_e |p_e - g_e| / max_e |g_e|  (over finite g; 0 / 0 = 0, x / 0 = inf)
//   ulp      = max_e ULP distance of round(p_e) from g_e in the format (narrow.hpp)
//   NaN never matches (inf); an infinity matches only the same infinity.
//
// The verdict of a different backend (derivation in docs/goldens.md "Error budgets"): noise when
//   normwise <= allowed = 2 * budget.normwise + 2^(1 - significand bits)   (allowed_normwise)
// and bug otherwise. The ULP budget is recorded and reported, not judged: an element near 0
// that comes out of cancellation (y = z * w + b) changes sign under one more rounding, which
// counts thousands of ordered-integer ulps in a correct program.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "compare/compare.hpp"
#include "core/narrow.hpp"

namespace shardsim {

struct GoldenEntry;

struct TensorBudget {
  double normwise = 0;
  double ulp = 0;
};

// The larger of each gap.
TensorBudget widest(const TensorBudget& a, const TensorBudget& b);

// The largest normwise gap a correct backend may show: twice the budget plus one unit in the
// last place of the tensor's largest value, relative (2^(1 - significand bits)).
double allowed_normwise(NarrowFormat format, double budget);

// Accumulates the gap of program values from a golden tensor, element by element.
class GapMeter {
 public:
  // `golden`: the golden's values (each a value of `format`), row-major.
  GapMeter(NarrowFormat format, std::vector<double> golden);
  void add(std::int64_t index, double program);
  TensorBudget gap() const;

 private:
  NarrowFormat format_;
  std::vector<double> golden_;
  double scale_ = 0;    // max |g| over finite g
  double max_abs_ = 0;  // max |p - g|
  double max_ulp_ = 0;
};

// The programs the budgets are taken over (docs/goldens.md, manifest "budgets").
struct BudgetPrograms {
  std::vector<ReduceOrder> reduce_orders{ReduceOrder::rank, ReduceOrder::ring, ReduceOrder::tree};
  std::vector<Schedule> schedules{Schedule{}, Schedule{Schedule::Kind::reverse, 0}};
};

// Budgets of a golden set: per entry of `entries`, its budget (entries that are not BF16/F16, or
// whose format has none, stay empty), and per format without budgets the reason.
struct GoldenBudgets {
  BudgetPrograms programs;                             // what they were taken over
  std::vector<std::optional<TensorBudget>> per_entry;  // aligned with the entries
  std::optional<std::string> bf16_unavailable;         // set when bf16 has no budgets: why
  std::optional<std::string> f16_unavailable;
};

// Runs the correct programs of every narrow format present in `entries` and measures each
// narrow entry's gap. A scenario with faults has no correct program (its sharded program is the
// seeded bug): no budgets, with that reason. A format whose runs are refused (fsdp and
// micro-batched scenarios are not modelled at bf16/f16; an oracle that overflows f16) has none
// either, with the refusal as the reason.
// REQUIRES: `entries` were built from `reference` (GoldenEntry::boundary indexes its boundaries).
GoldenBudgets compute_budgets(const Scenario& scenario, const RunReport& reference,
                              const std::vector<GoldenEntry>& entries,
                              const BudgetPrograms& programs = {});

}  // namespace shardsim
