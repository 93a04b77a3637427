// The diagnosis signatures: pure measurements over one or a few boundaries' values, each
// returning a Finding (diagnosis.hpp) with its probable cause, a confidence and one line of
// evidence. They take plain values (Observed), so each is tested on synthetic tensors; the
// orchestrator (sim/diagnosis/diagnose.cpp) picks the boundaries and parameters they read.
//
// Tolerances are relative to `unit`, the unit roundoff of the values compared: 2^-24 for an f32
// run, 2^-53 for f64 and mp runs (whose values are read as f64). A recomputed alternative "fits"
// when its normwise residual max|s - a| / max|a| is at most kFitUlps * unit.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "diagnosis/diagnosis.hpp"
#include "precision/precision_diff.hpp"

namespace shardsim {

inline constexpr double kFitUlps = 4096;  // 2^12 u: a dozen roundings of a row of ~100 terms

// One boundary's values as the signatures read them, in double.
// The one placement of a boundary on a 1-D mesh: the signatures read positions through it, so
// diagnose() runs on 1-D meshes only (N-D meshes get no diagnosis yet).
inline const Placement& placement_1d(const TraceEntry& e) { return e.layout.on(0); }

struct Observed {
  TraceEntry entry;                        // global shape, placement, each rank's slice
  std::vector<double> dense;               // the oracle's global tensor; empty: none
  std::vector<std::vector<double>> ranks;  // each rank's local tensor, padding included
};

// From a boundary captured by RunOptions::capture_tensors (f64 values).
Observed observed_from(const BoundaryResult& result);
// Synthetic: `dense` laid out over `ranks` with `placement` (every rank's slice equal to the
// dense values; a Partial placement gives rank 0 the values and the others zeros).
Observed observed_of(const std::string& tensor, const Shape& global, const Placement& placement,
                     int ranks, std::vector<double> dense);

// One compared element: the rank holding it, its global flat index, the sharded value. Partial
// tensors are summed in rank order (rank 0 reported), as the comparator does.
struct Held {
  int rank = 0;
  std::int64_t global = 0;
  double sharded = 0;
};
std::vector<Held> held_elements(const Observed& o);
// Sets rank `rank`'s copy of global element `global`. REQUIRES: the rank holds it.
void set_held(Observed& o, int rank, std::int64_t global, double value);
// The normwise gap max|s - d| / max|d| over the held elements (0 when d is all zero and s = d).
double normwise_gap(const Observed& o);
// The same against `reference` (a recomputed alternative, global flat order) in place of the
// oracle's values. REQUIRES: reference empty or holding the boundary's global element count.
double normwise_gap_to(const Observed& o, const std::vector<double>& reference);

// ---- values -----------------------------------------------------------------------------------

struct NamedCount {
  std::string name;  // "ranks", "hidden", "batch*seq", ...
  std::int64_t value = 0;
};

// constant_ratio: over the differing elements, sharded/dense is one constant (spread at most
// max(64 u, 1e-6) relative). Matched against n, 1/n (-> wrong_divisor) and (n-1)/n, n/(n-1) and
// their square roots (-> normalization_convention: the unbiased variance factor) for each named
// count, then against small integers and reciprocals 2..64 (-> wrong_divisor, weaker).
Finding constant_ratio(const Observed& o, const std::vector<NamedCount>& counts, double unit);

// constant_fill: every held sharded value is one constant while the dense values vary
// (-> default_value; stronger for 0 and 1, the default inits).
Finding constant_fill(const Observed& o);

// hidden_cast: in a run wider than the narrow type, the differing elements' relative gaps sit
// at the narrow type's rounding (f32 2^-24, f16 2^-11, bf16 2^-8): at most 2^(1-p) and with a
// median within [2^(-p-4), 2^(1-p)], p the narrow significand bits (-> hidden_cast). Stronger
// when the sharded values are exactly representable in the narrow type (the cast is the last
// operation). Never when the dense values are all narrow numbers already; f16 and bf16, whose
// gaps a bug imitates more easily, need half the sharded values narrow.
Finding hidden_cast(const Observed& o, unsigned run_bits);

// ---- training ---------------------------------------------------------------------------------

// replica_drift: `after` is a Replicate parameter whose replicas disagree; `before` its value
// before the update (dense values read), `shares` its Partial gradient (each rank's share).
// Each replica's step before - after_r is fitted as lr * g_r for g_r the rank's own share, then
// for sums over groups of g ranks (contiguous and strided, g | k, 1 < g < k)
// (-> unreduced_gradients). Without `before`/`shares`: replicas that disagree, weakly.
Finding replica_drift(const Observed& after, const Observed* before, const Observed* shares,
                      double unit);

// ---- randomness -------------------------------------------------------------------------------

// mask_pattern: `mask` is a 0/1 mask boundary, `check` the repetition detector's boundary when
// there is one. Flags there -> seed_repetition. Otherwise each differing rank's mask is compared
// with the dense slice: every one the dense mask at one shifted flat offset (chance below 1e-9)
// -> position_offset; agreement no better than chance (q^2 + (1-q)^2, q the dense drop rate;
// binomial upper tail > 1e-3), or the detector's note "not reproducible" -> rank_seed_offset,
// weak when p is so small that fewer than 10 disagreements are expected by chance.
Finding mask_pattern(const Observed& mask, const Observed* check);

// ---- positions --------------------------------------------------------------------------------

// rank_offset_gap: Shard(axis): the gap is zero on the rank at offset 0 and nonzero on every
// non-empty rank at a nonzero offset (-> position_offset; weaker with a single such rank). Says
// so when the per-rank gap also grows with the offset (3+ such ranks).
Finding rank_offset_gap(const Observed& o);

// shard_edge_gap: Shard(axis): every differing position along the axis lies within one position
// of an edge between two non-empty shards, and at least one interior position matches
// (-> position_offset: a halo or boundary off by one).
Finding shard_edge_gap(const Observed& o);

// shifted_copy: along the sharded axis (else each axis), the differing sharded values equal the
// dense values at positions shifted by one s != 0, per rank (-> position_offset).
Finding shifted_copy(const Observed& o, double unit);

struct RopeGeometry {
  std::string pos_axis;  // "seq" or "kv"
  std::string dim_axis = "head_dim";
  double theta = 10000.0;
  bool interleaved = false;       // pairs (2i, 2i+1); else (i, i + D/2)
  std::int64_t max_shift = 4096;  // |shift| searched
};
// rope_rotation: each differing token's head_dim vector is the dense one rotated plane by plane
// (pair norms equal) by angles shift * theta^(-2i/D) for one integer shift per token
// (-> position_offset). Reports whether one shift fits every token, one per rank (minus the
// rank's offset: local positions) or one per token.
Finding rope_rotation(const Observed& o, const RopeGeometry& rope, double unit);

// window_mask: lse of sliding-window/causal attention recomputed from the dense queries and keys
// with the mask bound moved by one (window + 1, window - 1, causal admitting the next key);
// a variant that reproduces the sharded lse -> position_offset.
struct AttentionCase {
  const Observed* lse = nullptr;  // [batch, seq, head]
  const Observed* q = nullptr;    // dense [batch, seq, head, head_dim], after RoPE
  const Observed* k = nullptr;    // dense [batch, kv, head, head_dim], after RoPE; kv = L + seq
  std::optional<std::int64_t> window;
};
Finding window_mask(const AttentionCase& c, double unit);

// ring_merge: at a boundary of the ring's merged results (rows [batch, seq, head, ...]), every
// row whose window falls in one KV block (no merge happened) matches the oracle and most of the
// rows that merged two or more blocks (more than half their elements) carry the gap ->
// softmax_merge. A position bug moves single-block rows too; a mask bound moved by one moves
// only the merged rows where it admits or drops a key.
struct RingCase {
  const Observed* o = nullptr;  // the failing boundary, rows (batch, seq, head[, head_dim])
  std::int64_t kv = 0;          // keys in the KV axis: cache + chunk
  std::optional<std::int64_t> window;
  int group = 1;                           // cp ranks: the KV axis is split into `group` blocks ...
  SplitPolicy split = SplitPolicy::chunk;  // ... as the keys' shard placement splits it
};
Finding ring_merge(const RingCase& c, double unit);

// ---- streaming and provenance -----------------------------------------------------------------

// chunk_onset: every boundary of chunk 1 passes and the first divergence is in chunk >= 2 at a
// boundary chunk 1 does not have (state carried in from the previous chunk) -> cache_convention;
// at a boundary chunk 1 has, no cause (a later chunk exercises mask bounds and positions that
// chunk 1 could not, so they first show there too).
struct TraceStatus {
  int id = 0;
  int step = 1;
  int chunk = 1;
  std::string op;
  std::string tensor;
  Status status = Status::unchecked;
};
Finding chunk_onset(const std::vector<TraceStatus>& trace, int failing_id);

// provenance: the differing sharded values are found, bit for bit, among one earlier boundary's
// dense values (at least 90% of them, and that boundary's values are not the analysed dense
// values) -> wrong_stage, or cache_convention when the analysed boundary is carried state.
Finding provenance(const Observed& o, const std::vector<const Observed*>& earlier,
                   bool carried_state);

// ---- conventions ------------------------------------------------------------------------------

// norm_convention: LayerNorm / RMSNorm statistics recomputed from the dense input under the
// alternatives (biased/unbiased variance, RMS/LayerNorm, eps inside/outside the sqrt or absent,
// statistics of each rank's slice of the normalized axis, one mean pooled over all tokens or
// over each rank's tokens); an alternative that fits every failing output of the op
// (mean, rstd, y) -> normalization_convention. Reports where the gap concentrates.
struct NormCase {
  bool rms = false;             // the op is rms_norm (else layer_norm)
  const Observed* x = nullptr;  // the op's input (dense values, placement)
  std::string axis = "hidden";
  double eps = 1e-5;
  std::vector<double> weight, bias;  // dense; empty: none
  const Observed* mean = nullptr;    // failing outputs of the op (null: not failing)
  const Observed* rstd = nullptr;
  const Observed* y = nullptr;
};
Finding norm_convention(const NormCase& c, double unit);

// loss_weighting: the masked MSE's sum, count, loss and gradient recomputed under other token
// weightings
// (every token, padding included -> padding_not_masked; the padding mask read with batch and seq
// swapped -> axis_order; each rank's own mean summed or averaged -> wrong_divisor).
struct LossCase {
  const Observed* y = nullptr;  // prediction (dense values, placement)
  const Observed* target = nullptr;
  std::vector<std::int64_t> valid_lengths;
  std::string batch_axis = "batch", seq_axis = "seq";
  const Observed* sum = nullptr;  // failing outputs (null: not failing)
  const Observed* count = nullptr;
  const Observed* loss = nullptr;
  const Observed* grad = nullptr;  // grad(y) = 2 (y - target) / count on counted tokens
};
Finding loss_weighting(const LossCase& c, double unit);

// ---- precision --------------------------------------------------------------------------------

// precision_trend: the analysed boundary's gap at several precisions, judged exactly as
// `shardsim precision` judges it over the same levels (detail::judge_boundary, the trend fit of
// precision/trend_fit.hpp), so the two never disagree: noise -> rounding (0.9), ill-conditioned
// noise -> rounding (0.8: correct arithmetic, but worth a look); exact, bug and undetermined ->
// absent, the evidence saying which.
struct TrendPoint {
  Precision precision;
  unsigned bits = 0;  // significand bits as run
  LevelGap gap;       // the comparator's gap at this level (detail::level_gap)
};
Finding precision_trend(const std::vector<TrendPoint>& points);

}  // namespace shardsim
