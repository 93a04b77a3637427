// Compare: the metrics and verdicts for a run at one precision.
//
// At every boundary the ranks' local tensors are checked against the dense oracle's global
// tensor (padding positions are skipped; a Replicate tensor is checked on every rank; a Partial
// tensor is summed in rank order first). Per boundary:
//   max_abs  max |s - d|
//   max_rel  max |s - d| / |d|   (|d| = 0 with s != d counts as +inf)
//   max_ulp  max ULP distance in the run's own scalar type; in a narrow run, in the narrow
//            format for a stored boundary (TraceEntry::narrow) and in f32 for an op's f32 part
//   status   exact   every element bitwise equal
//            within  every element has |s - d| <= rtol * scale (normwise; rtol from the
//                    scenario's [tolerance] or the default, see Scenario::rtol), where scale
//                    is the larger of max|d| and, for a value summed from Partial addends
//                    (a Partial boundary, or one naming a Partial tensor among its inputs),
//                    max_e sum_r |addend_r,e|: rounding in a reduction happens at the addends'
//                    magnitude, however much they cancel
//            fail    otherwise, or not bitwise equal where the boundary claims exactness.
// NaN never matches anything; an infinity matches only the same infinity.
//
// max_abs, max_rel, scale and rtol are Magnitudes (mantissa * 2^exponent, precision/
// magnitude.hpp): at mp levels the gap is about 2^-bits relative and the default rtol 2^(16 -
// bits), both below the smallest double past mp1090 (2^-1074). Each |s - d| and |d| is rounded
// once to 53 bits with an unbounded exponent, and the test |s - d| <= rtol * scale is made on
// those Magnitudes, so it holds or fails at every level up to kMaxMpBits as it would in exact
// arithmetic, up to that one 2^-53 relative rounding (as at f64).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/magnitude.hpp"
#include "runner/runner.hpp"

namespace shardsim {

enum class Status { exact, within, fail, unchecked };
std::string_view status_name(Status status);

struct Divergence {
  int boundary = 0;
  int step = 1;
  int chunk = 1;
  int micro = 0;        // TraceEntry::micro
  int micro_count = 0;  // TraceEntry::micro_count
  std::string op;
  std::string tensor;
  int rank = 0;
  std::vector<std::pair<std::string, std::int64_t>> index;  // global, by named axis
  double dense = 0;
  double sharded = 0;
  // mp, dd and qd runs only: both values in decimal with as many digits as it takes to tell them
  // apart (at least 17), since dense and sharded can round to the same double. Empty otherwise.
  std::string dense_text;
  std::string sharded_text;
  std::string reason;  // "not bitwise equal (exact boundary)", "outside tolerance", "NaN", ...
};

// One tensor's values as captured at a boundary (RunOptions::capture_tensors), row-major, each
// converted once with correct rounding from the run's own type (round-to-nearest-even; an mp
// value goes to f32 directly, never through f64).
struct CapturedValues {
  std::vector<float> f32;
  std::vector<double> f64;
  // mp, dd and qd runs only: each value exactly, as MPFR's hexadecimal "%Ra" text (e.g.
  // "0x1.8p+0"), so a later comparison can work at any precision. Empty for f32 and f64 runs
  // and without RunOptions::capture_exact (CapturedBoundary::exact_text).
  std::vector<std::string> exact;
  // Each value rounded once to bf16 and to f16 (bit patterns, narrow.hpp), from the run's own
  // value (an mp value through round_to_narrow, never through f32 or f64).
  std::vector<std::uint16_t> bf16;
  std::vector<std::uint16_t> f16;
  // dd and qd runs only, and only when some value is flagged: per value, the golden formats
  // (kNearF64 | kNearF32 | kNearBf16 | kNearF16, scalar.hpp; set by qd_exact.hpp) in which it
  // lies within the precision's error budget of a rounding midpoint, so that its golden could
  // round the other way in an exact computation. Empty when no value is flagged.
  std::vector<std::uint8_t> near_midpoint;
};

// Everything a boundary held: the oracle's global tensor and each rank's local tensor (padding
// positions included, as the rank holds them).
struct CapturedBoundary {
  bool has_dense = false;   // false when the boundary has no oracle counterpart
  bool exact_text = false;  // the values' `exact` texts were kept (an mp, dd or qd run that
                            // captured them: RunOptions::capture_exact)
  CapturedValues dense;
  std::vector<CapturedValues> ranks;  // one per rank, in rank order
};

struct BoundaryResult {
  TraceEntry entry;
  Status status = Status::unchecked;
  Magnitude max_abs;
  Magnitude max_rel;
  double max_ulp = 0;  // a count of units in the last place: within the double range
  Magnitude scale;     // max |d| over the boundary's finite oracle values
  Magnitude rtol;
  std::optional<Divergence> first_bad;
  std::shared_ptr<const CapturedBoundary> captured;  // only with RunOptions::capture_tensors
};

// Machine-dependent measurements of one run, taken only on request (`run --resources`), so
// that reports stay byte-identical from machine to machine otherwise.
struct RunResources {
  std::int64_t peak_rss_bytes = 0;  // the process's resident-set high-water mark after the run
  double wall_seconds = 0;          // this precision's run, judged
};

struct RunReport {
  std::string scenario;
  Precision precision;
  std::optional<Accumulate> accumulate;  // bf16 and f16 runs only (storage.hpp)
  unsigned significand_bits = 0;
  ReduceOrder reduce_order = ReduceOrder::rank;
  Schedule schedule;
  bool pass = true;
  std::optional<Divergence> first_divergence;
  std::vector<BoundaryResult> boundaries;
  ActivationMemory activation;  // per-rank bytes kept for backward (runner.hpp)
  std::optional<RunResources> resources;
};

// Runs `scenario` at `precision` (the one place precision is dispatched) and judges it. A bf16 or
// f16 run accumulates as options.accumulate, else the scenario's accumulate, says.
RunReport evaluate(const Scenario& scenario, const Precision& precision,
                   const RunOptions& options = {});

// The verdict over all precisions of a replay: it fails when any precision fails, and its first
// divergence is the earliest boundary that fails at any precision (earliest_failure below).
struct Outcome {
  bool pass = true;
  std::optional<Precision> failed_at;
  std::optional<Divergence> first_divergence;
  bool matches_expectation = true;
  std::string why;  // when it does not match: what was expected and what happened
};

// The failing run whose first divergence comes first in the trace, or null when every run
// passed. Every precision of a replay records the same boundaries under the same trace ids, so
// the ids compare across runs; between runs failing at the same boundary, the first in `reports`
// (the order run). A looser level can pass the boundary where a bug first shows: f32's default
// rtol is 2^-8 of the tensor's scale, so a wrong mask that moves a loss sum by 2^-11 relative is
// `within` at f32 and `fail` at f64, and f32 fails only later, where a boundary claims
// exactness. The program left its oracle at the earlier boundary, which the f64 run saw.
const RunReport* earliest_failure(const std::vector<RunReport>& reports);

// Judges the reports against the scenario's [expect] block (verdict and, for an expected failure,
// the named step/chunk/tensor/op of the first divergence).
Outcome judge(const Scenario& scenario, const std::vector<RunReport>& reports);

namespace detail {
// Per-precision entry points (compare.cpp, compare_mp.cpp).
RunReport evaluate_f32(const Scenario&, const RunOptions&);
RunReport evaluate_f64(const Scenario&, const RunOptions&);
RunReport evaluate_mp(const Scenario&, unsigned bits, const RunOptions&);
RunReport evaluate_dd(const Scenario&, const RunOptions&);  // compare_dd.cpp
RunReport evaluate_qd(const Scenario&, const RunOptions&);  // compare_qd.cpp
// accumulate = storage (compare_narrow.cpp); accumulate = f32 runs evaluate_at<float>.
RunReport evaluate_narrow_storage(const Scenario&, const Precision&, const RunOptions&);
}  // namespace detail

}  // namespace shardsim
