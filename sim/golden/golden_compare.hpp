// shardsim compare: a backend's tensors (a candidate) against a golden directory, tensor by
// tensor, with ULP and relative metrics. The CLI (sim/cli/compare_command.cpp) only parses and
// prints; the numerics live here.
//
// Per element, with g the golden value and c the candidate's:
//   abs = |c - g|;  rel = abs / |g| (inf when g = 0 and c != g);
//   ulp = ULP distance in the golden's dtype (ordered-integer mapping on its bit patterns,
//         scalar.hpp and narrow.hpp for BF16/F16) after rounding c once to that dtype; integer
//         and mask goldens count |c - g|.
// A BF16 golden takes a U16 candidate as bf16 bit patterns (npy has no bf16); a BF16 or F16
// golden refuses any other integer or boolean candidate (InputError).
//   within tolerance  iff  abs <= atol + rtol * |g|,  or  ulp <= max_ulp (when --max-ulp is given).
//   A NaN never matches (not even a NaN golden); an infinity matches only the same infinity.
// Defaults when none of --rtol/--atol/--max-ulp is given (torch.testing.assert_close's):
//   F32 goldens rtol 1.3e-6, atol 1e-5;  F64 goldens rtol 1e-7, atol 1e-7;
//   BF16 goldens rtol 1.6e-2, atol 1e-5;  F16 goldens rtol 1e-3, atol 1e-5;  U8 masks exact.
// When any is given, an unspecified rtol or atol is 0 and the ULP rule applies only if given.
//
// With --precision bf16|f16 (CompareOptions::precision) the tolerances are replaced by the error
// budgets of correct programs (budget.hpp): only the goldens of that format are compared, each
// candidate tensor's normwise and ULP gaps are measured as a budget is, and the tensor is
// `noise` when its normwise gap is within the allowance (2 * budget + one unit), `bug`
// otherwise, with the ratio gap / budget; the ULP gap is reported against its budget, not
// judged (budget.hpp says why). A manifest without budgets for the format is bad input (InputError).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "golden/golden_set.hpp"

namespace shardsim {

struct CompareOptions {
  std::optional<double> rtol;
  std::optional<double> atol;
  std::optional<double> max_ulp;
  // Judge against the goldens' error budgets at this narrow precision (excludes the three above).
  std::optional<NarrowFormat> precision;
  // golden name -> candidate name (for an npy candidate: the file name without ".npy").
  std::vector<std::pair<std::string, std::string>> map;
};

// One element, located: its index by named axis in the boundary's global tensor and the rank
// that owns it.
struct ElementReport {
  std::vector<std::pair<std::string, std::int64_t>> index;
  std::string owner;  // "rank 3", "rank 3 (padding)", "every rank (Replicate)", ...
  double golden = 0;
  double candidate = 0;
  double abs = 0;
  double rel = 0;
  double ulp = 0;
};

// A tensor judged against its error budget (--precision).
struct BudgetJudgement {
  TensorBudget budget;      // the largest gaps of correct programs (the manifest's)
  double allowed_normwise = 0;  // allowed_normwise(format, budget.normwise)
  TensorBudget gap;         // the candidate's
  // gap / budget for each metric (inf when the budget is 0 and the gap is not; 0 when both are).
  double normwise_ratio = 0;
  double ulp_ratio = 0;
  bool noise = true;
};

struct TensorComparison {
  std::string golden;     // golden tensor name
  std::string candidate;  // candidate tensor name
  std::string dtype;      // the golden's dtype
  std::vector<std::int64_t> shape;
  std::string mismatch;   // non-empty when the shapes differ: nothing else is compared
  double rtol = 0;
  double atol = 0;
  std::optional<double> max_ulp_allowed;
  double max_abs = 0;
  double max_rel = 0;
  double max_ulp = 0;
  std::int64_t outside = 0;      // elements outside tolerance
  std::int64_t nonfinite = 0;    // non-finite candidate values that do not match
  std::vector<ElementReport> nonfinite_examples;  // the first few, in row-major order
  std::optional<ElementReport> worst;  // largest ULP distance; --precision: largest abs (ties: first)
  double scale = 0;                               // max |g| over finite golden values
  std::optional<BudgetJudgement> budget;          // with --precision
  bool pass = true;                               // with --precision: noise
};

struct ComparisonReport {
  std::string golden_precision;
  std::optional<NarrowFormat> budget_precision;  // --precision
  std::string budget_programs;                   // GoldenDir::budget_programs
  std::vector<TensorComparison> tensors;    // manifest order
  std::vector<std::string> golden_only;     // golden tensors the candidate does not have
  std::vector<std::string> candidate_only;  // candidate tensors with no golden counterpart
  bool pass = true;
};

// Throws InputError when a --map name is unknown or nothing could be compared.
ComparisonReport compare_candidate(const GoldenDir& golden, const Candidate& candidate,
                                   const CompareOptions& options);

// The terminal report (readable in 100 columns).
std::string format_comparison(const ComparisonReport& report);

}  // namespace shardsim
