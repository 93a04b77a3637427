// Diagnosis: from the first divergence to its probable cause.
//
// After a divergence the diagnosis replays the failing run with its tensors captured, measures a
// fixed list of signatures at the first divergent boundary (and at the boundaries around it),
// and ranks the probable causes they point to. Every signature is measured from the numbers:
// values, gaps, ratios, per-rank and per-position patterns, recomputed alternatives, the trend
// over precisions. None reads a fault's name or the scenario's text; the scenario model is read
// only for what the program is (shapes, placements, the steps' inputs and numeric parameters).
// The signatures, their inputs and their thresholds are in signatures.hpp; docs/diagnosis.md
// has the table signature -> probable cause -> evidence printed.
//
// Diagnosis stays off the success path: it runs only after a divergence (`run`, the report's
// "diagnosis") or on request (`explain --diagnose`).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "compare/compare.hpp"

namespace shardsim {

// The probable causes, one entry per kind of bug (and one for "not a bug").
enum class Cause {
  wrong_divisor,             // a mean taken twice, a sum instead of a mean, the wrong count
  unreduced_gradients,       // gradients not all-reduced, or reduced over the wrong group
  seed_repetition,           // ranks draw the same random stream (or a shifted copy)
  rank_seed_offset,          // independent per-rank random streams, not the dense program's
  position_offset,           // local instead of global positions: RoPE, causal/window masks
  cache_convention,          // the carried cache holds another stage (keys before RoPE, ...)
  normalization_convention,  // another statistic: unbiased var, local/pooled stats, RMS, eps
  hidden_cast,               // values rounded through a narrower type (f32, bf16, f16)
  padding_not_masked,        // padding tokens carry weight in a loss or statistic
  axis_order,                // token identity permuted: axes read in the wrong order
  default_value,             // a constant (ones/zeros init) in place of the data
  wrong_stage,               // another boundary's values: a transform skipped or a stale tensor
  softmax_merge,             // partial softmax results merged wrongly (ring / flash LSE merge)
  optimizer_convention,      // another update rule: AdamW's bias correction, decay, eps, step t
  head_grouping,             // query heads read the wrong kv heads (GQA group mapping)
  vocab_reduction,           // a vocab-parallel softmax statistic not reduced over the vocab's ranks
  tied_gradient,             // a parameter used twice (tied weights) gets one use's gradient
  unreduced_partial,         // a Partial activation used as if reduced (no all-reduce)
  rounding,                  // not a bug: the gap shrinks with precision
};
inline constexpr int kCauseCount = 19;

// "wrong_divisor", ... (the report's "cause").
std::string_view cause_name(Cause cause);
// One line: what the cause means, e.g. "a mean taken twice, a sum instead of a mean, or the
// wrong divisor".
std::string_view cause_summary(Cause cause);

// One signature's measurement.
struct Finding {
  std::string signature;  // "constant_ratio", "replica_drift", ...
  Cause cause = Cause::wrong_divisor;
  double confidence = 0;  // in [0, 1]; 0 when the signature is absent
  std::string evidence;   // one line: what was measured (also why not, when absent)

  bool present() const { return confidence > 0; }
};

struct Diagnosis {
  bool analysed = false;          // false: nothing diverged, nothing to diagnose
  Precision precision;            // the run analysed
  int boundary = -1;              // the boundary analysed (trace id)
  std::string where;              // "step 1 chunk 1 boundary #9 mse_loss -> loss"
  std::vector<Finding> findings;  // every signature measured, in the order of signatures.hpp
  std::vector<Finding> causes;    // up to three, one per cause, most likely first
};

// The most causes a diagnosis names.
inline constexpr std::size_t kMaxCauses = 3;

// After a replay: diagnoses the replay's first divergence, the earliest failing boundary of any
// precision in `reports` (earliest_failure, as judge reports it). Returns analysed = false when
// every run passed.
Diagnosis diagnose(const Scenario& scenario, const std::vector<RunReport>& reports,
                   const RunOptions& options = {});

// On request: diagnoses boundary `boundary` (a trace id) of the run at `precision`, whether or
// not it diverged. REQUIRES: 0 <= boundary < the trace's length (else InputError).
Diagnosis diagnose_boundary(const Scenario& scenario, const Precision& precision,
                            const RunOptions& options, int boundary);

}  // namespace shardsim
