// The trend fit and verdict of shardsim precision (precision/trend_fit.hpp states the rule).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.hpp"
#include "precision/trend_fit.hpp"

namespace shardsim {

namespace {

std::string fixed(double v, const char* format = "%.2f") {
  char buf[32];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// "2^26.1 (7.35e+07)": kappa from its log2, in both forms.
std::string condition_text(double log2_kappa) {
  const double whole = std::floor(log2_kappa);
  return "2^" + fixed(log2_kappa, "%.1f") + " (" +
         Magnitude::scaled(std::exp2(log2_kappa - whole), static_cast<long>(whole)).sci() + ")";
}

std::string gap_list(const std::vector<LadderPoint>& points) {
  std::string out;
  for (const LadderPoint& p : points) out += (out.empty() ? "" : ", ") + p.level + " " + p.gap.sci();
  return out;
}

}  // namespace

const char* verdict_name(Verdict verdict) {
  switch (verdict) {
    case Verdict::exact: return "exact";
    case Verdict::noise: return "noise";
    case Verdict::ill_conditioned_noise: return "ill-conditioned noise";
    case Verdict::bug: return "bug";
    case Verdict::undetermined: return "undetermined";
    case Verdict::not_applicable: return "n/a";
  }
  return "?";
}

TrendFit fit_trend(const std::vector<LadderPoint>& points) {
  TrendFit fit;
  for (std::size_t l = 0; l < points.size(); ++l) {
    SHARDSIM_ASSERT(l == 0 || points[l - 1].bits < points[l].bits, "levels not ascending by bits");
    if (points[l].gap.is_finite() && !points[l].gap.is_zero()) fit.fitted.push_back(l);
  }
  if (fit.fitted.size() >= 2) {
    double mean_x = 0, mean_y = 0;
    for (std::size_t l : fit.fitted) {
      mean_x += points[l].bits;
      mean_y += points[l].gap.log2();
    }
    mean_x /= static_cast<double>(fit.fitted.size());
    mean_y /= static_cast<double>(fit.fitted.size());
    double sxx = 0, sxy = 0;
    for (std::size_t l : fit.fitted) {
      const double dx = points[l].bits - mean_x;
      sxx += dx * dx;
      sxy += dx * (points[l].gap.log2() - mean_y);
    }
    fit.slope = sxy / sxx;  // sxx > 0: the bits are distinct
    fit.intercept = mean_y - *fit.slope * mean_x;
  }
  fit.vanishes = !points.empty() && points.back().gap.is_zero() && !fit.fitted.empty();
  std::vector<std::size_t> candidates;
  for (std::size_t l : fit.fitted) {
    if (points[l].gap.log2() < kSaturatedLog2) candidates.push_back(l);
  }
  if (candidates.empty()) candidates = fit.fitted;
  auto log2_kappa = [&](std::size_t l) { return points[l].gap.log2() + points[l].bits; };
  std::stable_sort(candidates.begin(), candidates.end(),
                   [&](std::size_t a, std::size_t b) { return log2_kappa(a) < log2_kappa(b); });
  if (!candidates.empty()) {
    fit.condition_level = candidates[(candidates.size() - 1) / 2];
    fit.log2_condition = log2_kappa(*fit.condition_level);
  }
  return fit;
}

TrendVerdict judge_trend(const std::vector<LadderPoint>& points, const TrendFit& fit) {
  const LadderPoint& top = points.back();
  if (fit.fitted.empty()) {  // not bitwise equal somewhere, yet no level measures a gap
    return {Verdict::noise, "no level has a nonzero gap (they differ only in the sign of a zero)"};
  }
  if (points.size() < kMinTrendLevels) {
    return {Verdict::undetermined, std::to_string(points.size()) + " level" +
                                       (points.size() == 1 ? "" : "s") + ": a trend needs at least " +
                                       std::to_string(kMinTrendLevels) + " (gap " + gap_list(points) + ")"};
  }
  if (fit.fitted.size() == 1 && fit.fitted.front() == points.size() - 1) {
    const std::string only = "a gap at the top level " + top.level + " only, exact below; condition " +
                             condition_text(fit.log2_condition);
    if (fit.log2_condition <= kResolutionLog2) {
      return {Verdict::noise, only + ": at the level's resolution"};
    }
    return {Verdict::undetermined, only + ": no trend to read"};
  }
  const std::string slope =
      fit.slope ? "slope " + fixed(*fit.slope) + " per bit over " + std::to_string(fit.fitted.size()) + " levels"
                : "";
  const bool shrinks = fit.vanishes || (fit.slope && *fit.slope <= kNoiseSlopeMax);
  if (!shrinks && !fit.slope) {
    return {Verdict::undetermined, "no two levels with a finite gap (gap " + gap_list(points) + ")"};
  }
  if (!shrinks) {
    return {Verdict::bug, "flat as precision grows: " + slope + "; " + top.gap.sci() + " normwise at " +
                              top.level};
  }
  const std::size_t at = *fit.condition_level;
  const bool ill = fit.log2_condition > kIllConditionedLog2;
  std::string why = slope;
  if (fit.vanishes) {
    std::size_t from = points.size() - 1;
    while (from > 0 && points[from - 1].gap.is_zero()) --from;
    why = "exact from " + points[from].level + " up" + (slope.empty() ? "" : "; " + slope);
  }
  why += "; condition " + condition_text(fit.log2_condition) + " at " + points[at].level;
  if (ill) why += " > 2^" + fixed(kIllConditionedLog2, "%.0f");
  return {ill ? Verdict::ill_conditioned_noise : Verdict::noise, why};
}

}  // namespace shardsim
