// The trend verdict of shardsim precision: is a boundary's sharded-vs-dense gap rounding noise
// or a bug, read from the whole precision ladder (docs/precisions.md "Precision diff").
//
// A level is described by its significand bits only (bf16 8, f16 11, f32 24, f64 53, mpN about
// N: the bits the level actually ran with, e.g. 257 for mp256), so any precision fits the rule.
// Per level l: bits b_l and the normwise gap g_l = max|sharded - dense| / max|dense| at l.
//
// Rounding noise of a computation with condition number kappa gives g_l ~ kappa * 2^-b_l: log2(g)
// falls one bit per bit of precision (slope -1). A semantic bug gives a gap that does not depend
// on the precision (slope 0). The rule:
//   fitted levels   0 < g_l < inf ("resolved"). Exact levels (g_l = 0: the level resolved no
//                   difference) are not fitted; a gap below the level's own resolution
//                   (g_l < 2^-b_l: only elements smaller than the largest differ, by about their
//                   own ulp) is fitted like any other, since it shrinks with the level's rounding.
//   slope           least squares of log2(g_l) against b_l over the fitted levels.
//   vanishes        the top level is exact and some level below it is not: a bug would still
//                   show there.
//   condition       kappa_l = g_l * 2^b_l = gap / (2^-bits * scale), scale = max|dense| at l,
//                   over the fitted levels that are not saturated (g_l < 1/2; a saturated gap has
//                   lost every bit and only bounds kappa from below; all fitted levels when every
//                   one is saturated). The one reported is the lower median of those kappa_l,
//                   named with its level, so one outlying level does not move it.
// Verdicts (judge_trend; n/a, exact and the two definite bugs are decided before, in
// precision/diff.cpp):
//   undetermined            fewer than kMinTrendLevels levels, or a gap at the top level only
//                           (every other level exact) of more than 2^kResolutionLog2 rounding
//                           units (kappa): no trend to read, no guess;
//   noise                   slope <= kNoiseSlopeMax (within kSlopeTolerance of -1, or steeper), or
//                           the gap vanishes at the top, or a gap at the top level only that is
//                           at that level's resolution (kappa <= 2^kResolutionLog2: a bug would
//                           have to be within a few rounding units of that level by chance);
//                           and condition <= 2^kIllConditionedLog2;
//   ill-conditioned noise   as noise, with condition > 2^kIllConditionedLog2: correct arithmetic
//                           that loses more than 20 bits, worth a look;
//   bug                     slope > kNoiseSlopeMax (the gap stays flat as precision grows) and
//                           the gap does not vanish at the top.
// Robustness: one level whose gap is off by a factor 2^k moves the slope by about k / (the bits
// spanned), e.g. 0.14 for k = 10 over f32..mp128, far from the 0.5 tolerance.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "core/magnitude.hpp"

namespace shardsim {

inline constexpr std::size_t kMinTrendLevels = 3;
inline constexpr double kNoiseSlope = -1.0;
inline constexpr double kSlopeTolerance = 0.5;
inline constexpr double kNoiseSlopeMax = kNoiseSlope + kSlopeTolerance;  // -0.5
inline constexpr double kIllConditionedLog2 = 20;
inline constexpr double kSaturatedLog2 = -1;  // g >= 1/2: saturated
inline constexpr double kResolutionLog2 = 4;  // kappa <= 16: at the level's resolution

enum class Verdict { exact, noise, ill_conditioned_noise, bug, undetermined, not_applicable };
// "exact", "noise", "ill-conditioned noise", "bug", "undetermined", "n/a".
const char* verdict_name(Verdict verdict);

struct LadderPoint {
  std::string level;  // "f32", "mp256"
  unsigned bits = 0;  // significand bits as run
  Magnitude gap;      // normwise
};

struct TrendFit {
  std::vector<std::size_t> fitted;  // indices of the fitted levels, ascending
  std::optional<double> slope;      // with two or more fitted levels
  std::optional<double> intercept;  // log2(gap) at 0 bits
  bool vanishes = false;
  std::optional<std::size_t> condition_level;  // the level whose kappa is reported
  double log2_condition = 0;                   // log2 kappa at condition_level
};

// REQUIRES: points ascending by bits.
TrendFit fit_trend(const std::vector<LadderPoint>& points);

struct TrendVerdict {
  Verdict verdict = Verdict::undetermined;
  std::string why;
};

// The verdict from the fit (see above). With no fitted level (every gap 0, though some level is
// not bitwise equal: -0 against +0), noise.
TrendVerdict judge_trend(const std::vector<LadderPoint>& points, const TrendFit& fit);

}  // namespace shardsim
