// precision_trend: a gap that shrinks with precision is rounding, not a bug.
#include <algorithm>
#include <cmath>

#include "shardsim/diagnosis/signatures.hpp"
#include "sim/diagnosis/format.hpp"

namespace shardsim {

Finding precision_trend(const std::vector<TrendPoint>& given) {
  Finding f{.signature = "precision_trend", .cause = Cause::rounding};
  std::vector<TrendPoint> points = given;
  std::stable_sort(points.begin(), points.end(),
                   [](const TrendPoint& a, const TrendPoint& b) { return a.bits < b.bits; });
  if (points.size() < 2) {
    f.evidence = "n/a: fewer than two precisions";
    return f;
  }
  std::string gaps;
  for (const TrendPoint& p : points) {
    gaps += (gaps.empty() ? "" : ", ") + p.precision + " " + diag::num(p.gap);
  }
  const TrendPoint& top = points.back();
  if (top.gap > top.bound) {
    f.evidence = "normwise gap " + gaps + ": it persists at " + top.precision + " (bound " +
                 diag::num(top.bound) + "): a bug, not rounding";
    return f;
  }
  bool shrinks = true, failed_below = false;
  for (std::size_t i = 0; i + 1 < points.size(); ++i) {
    shrinks = shrinks && points[i + 1].gap <= points[i].gap;
    failed_below = failed_below || points[i].gap > points[i].bound;
  }
  if (!shrinks || !failed_below) {
    f.evidence = "normwise gap " + gaps + ": no gap outside its bound that shrinks with precision";
    return f;
  }
  // Condition estimate: the gap in units of the level's roundoff at the highest level where it
  // is nonzero and not saturated (a gap near 1 has lost every bit and bounds nothing).
  std::string kappa;
  for (auto p = points.rbegin(); p != points.rend(); ++p) {
    if (p->gap <= 0 || p->gap >= 0.5) continue;
    const double estimate = p->gap / std::ldexp(1.0, -static_cast<int>(p->bits));
    kappa = "; condition estimate kappa ~ gap/u = " + diag::num(estimate) + " at " + p->precision +
            " (about " + diag::num(std::round(std::log2(std::max(estimate, 1.0)))) + " bits lost)";
    break;
  }
  f.confidence = 0.9;
  f.evidence = "normwise gap " + gaps + ": it shrinks with precision and is within the bound at " +
               top.precision + kappa;
  return f;
}

}  // namespace shardsim
