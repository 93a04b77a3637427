// precision_trend: the verdict `shardsim precision` gives the analysed boundary over the same
// levels. Noise (the gap shrinks about one bit per bit of precision) is rounding, not a bug.
#include <algorithm>

#include "diagnosis/signatures.hpp"

namespace shardsim {

namespace {

constexpr double kNoiseConfidence = 0.9;
constexpr double kIllConditionedConfidence = 0.8;

}  // namespace

Finding precision_trend(const std::vector<TrendPoint>& given) {
  Finding f{.signature = "precision_trend", .cause = Cause::rounding};
  std::vector<TrendPoint> points = given;
  std::stable_sort(points.begin(), points.end(),
                   [](const TrendPoint& a, const TrendPoint& b) { return a.bits < b.bits; });
  // Two names for the same significand (mp127 and mp128 both run with 128 bits): the first.
  points.erase(std::unique(points.begin(), points.end(),
                           [](const TrendPoint& a, const TrendPoint& b) { return a.bits == b.bits; }),
               points.end());
  if (points.empty()) {
    f.evidence = "n/a: no precision level";
    return f;
  }
  BoundaryDiff diff;
  std::vector<Precision> levels;
  std::vector<unsigned> bits;
  std::string gaps, names;
  for (const TrendPoint& p : points) {
    diff.gap.push_back(p.gap);
    levels.push_back(p.precision);
    bits.push_back(p.bits);
    gaps += (gaps.empty() ? "" : ", ") + p.precision.name() + " " + p.gap.normwise.sci();
    names += (names.empty() ? "" : ",") + p.precision.name();
  }
  detail::judge_boundary(diff, levels, bits);
  f.evidence = "normwise gap " + gaps + ": `shardsim precision --levels " + names + "` says " +
               verdict_name(diff.verdict) + (diff.why.empty() ? "" : " (" + diff.why + ")");
  switch (diff.verdict) {
    case Verdict::noise: f.confidence = kNoiseConfidence; break;
    case Verdict::ill_conditioned_noise: f.confidence = kIllConditionedConfidence; break;
    default: break;  // exact, bug, undetermined or n/a: not explained by rounding
  }
  return f;
}

}  // namespace shardsim
