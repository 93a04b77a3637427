// The diagnosis context: one captured run of a scenario and the look-ups the signatures need
// (internal to sim/diagnosis).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "diagnosis/signatures.hpp"

namespace shardsim::diag {

class Context {
 public:
  // REQUIRES: `run` was captured (RunOptions::capture_tensors).
  Context(const Scenario& scenario, RunReport run);

  const Scenario& scenario() const { return scenario_; }
  const RunReport& run() const { return run_; }
  const BoundaryResult& result(int id) const {
    return run_.boundaries[static_cast<std::size_t>(id)];
  }
  const TraceEntry& entry(int id) const { return result(id).entry; }
  // The boundary's values (converted once, then kept).
  const Observed& observed(int id);
  // The unit roundoff of the captured values: 2^-24 at f32, 2^-53 otherwise (f64 reads).
  double unit() const;

  // The latest boundary at or before `before` whose tensor or oracle name is `name` and that
  // has oracle values; with `same_chunk`, only in `before`'s step and chunk.
  std::optional<int> latest(const std::string& name, int before, bool same_chunk = false) const;
  // The failing boundaries of `before`'s step and chunk whose oracle name is `name`.
  std::optional<int> failing(const std::string& name, int near) const;
  // The scenario step whose output `id`'s tensor derives from (NAME, NAME.PART, NAME@WHERE).
  const StepSpec* owning_step(int id) const;
  // Whether `id` is in a chunk >= 2 at a boundary chunk 1 of its step does not have.
  bool carried_state(int id) const;

 private:
  const Scenario& scenario_;
  RunReport run_;
  std::map<int, Observed> observed_;
};

// The signatures that need more than the analysed boundary, with their inputs found in `ctx`.
// Each returns an absent Finding ("n/a: ...") when the boundary is not of its kind.
Finding replica_signature(Context& ctx, int id);
Finding mask_signature(Context& ctx, int id);
Finding rope_signature(Context& ctx, int id);
Finding window_signature(Context& ctx, int id);
Finding ring_signature(Context& ctx, int id);
Finding provenance_signature(Context& ctx, int id);
Finding norm_signature(Context& ctx, int id);
Finding loss_signature(Context& ctx, int id);

// adamw_update: at a failing AdamW boundary (a parameter, NAME.exp_avg or NAME.exp_avg_sq; no
// micro-batches), the update recomputed in double from the oracle's inputs before it (the
// parameter, the reduced gradient, the previous step's moments or zeros) under each of
// adamw_variants(); a variant that reproduces the ranks' values within 2^12 units of the analysed
// run's rounding while the correct update misses by 16 times that -> optimizer_convention.
struct AdamWVariant {
  std::string what;  // the evidence's words
  bool bias_correction = true;
  bool coupled_decay = false;   // g + weight_decay * p, no decoupled decay
  bool eps_inside_sqrt = false;
  int step_shift = 0;  // the bias correction's t + shift
};
const std::vector<AdamWVariant>& adamw_variants();
Finding optimizer_signature(Context& ctx, int id);

// kv_group: at the attn boundary of a gqa_attention step, attention recomputed in double from
// the oracle's q_rot, k_rot and v with query head h reading kv head h % n_kv_head, or kv head 0
// for every head; one that reproduces the ranks' values (2^12 units, 16 times closer than the
// specified h / (n_head / n_kv_head)) -> head_grouping (heads.cpp).
Finding kv_group_signature(Context& ctx, int id);
// unreduced_share: a tensor held Replicate on two or more ranks whose copies differ and sum (in
// rank order) to the oracle's within 2^12 units -> unreduced_gradients for a gradient (each rank
// kept its own share), unreduced_partial for an activation (a Partial output never all-reduced)
// (heads.cpp).
Finding unreduced_share_signature(Context& ctx, int id);
// vocab_parallel: at a failing Replicate part of a cross_entropy step (NAME.max, .sumexp,
// .target_logit, .lse), the part recomputed in double from the oracle's logits and the labels
// with each rank's own maximum or sum (never all-reduced), the target logit added by every rank
// (non-owners their shard's first column), or the padded columns (logit 0) inside the max and
// sum; one that reproduces every rank's copy (2^12 units, 16 times closer than the specified
// algorithm) -> vocab_reduction, or padding_not_masked for the padding (vocab.cpp).
Finding vocab_signature(Context& ctx, int id);
// tied_uses: a failing gradient that a second backward (another op) added to in the same step:
// the ranks' values are this use's share alone or the earlier use's alone (the oracle's values
// before and after the second use) -> tied_gradient (vocab.cpp).
Finding tied_uses_signature(Context& ctx, int id);
// The counts a ratio may be: ranks, every axis extent of the program, batch*seq.
std::vector<NamedCount> program_counts(const Scenario& scenario);

}  // namespace shardsim::diag
