// replica_drift: replicas of a parameter that drift apart, each stepping with its own gradient.
#include <algorithm>
#include <cmath>
#include <functional>

#include "diagnosis/signatures.hpp"
#include "diagnosis/format.hpp"

namespace shardsim {

namespace {

using diag::num;
using Values = std::vector<std::vector<double>>;  // per rank

// Fits step[r][e] = lr * grad[r][e] over every rank and element; returns the normwise residual
// max |step - lr grad| / max |step| and the fitted lr.
double fit_residual(const Values& step, const Values& grad, double& lr) {
  double num_sum = 0, den_sum = 0, step_max = 0;
  for (std::size_t r = 0; r < step.size(); ++r) {
    for (std::size_t e = 0; e < step[r].size(); ++e) {
      num_sum += step[r][e] * grad[r][e];
      den_sum += grad[r][e] * grad[r][e];
      step_max = std::max(step_max, std::fabs(step[r][e]));
    }
  }
  lr = den_sum > 0 ? num_sum / den_sum : 0;
  double worst = 0;
  for (std::size_t r = 0; r < step.size(); ++r) {
    for (std::size_t e = 0; e < step[r].size(); ++e) {
      worst = std::max(worst, std::fabs(step[r][e] - lr * grad[r][e]));
    }
  }
  return step_max > 0 ? worst / step_max : INFINITY;
}

// Each rank's gradient summed over its group: `member(r, s)` says whether s is in r's group.
Values group_sums(const Values& shares, const std::function<bool(int, int)>& member) {
  const int ranks = static_cast<int>(shares.size());
  Values out(shares.size(), std::vector<double>(shares[0].size(), 0.0));
  for (int r = 0; r < ranks; ++r) {
    for (int s = 0; s < ranks; ++s) {
      if (!member(r, s)) continue;
      for (std::size_t e = 0; e < out[0].size(); ++e) out[r][e] += shares[s][e];
    }
  }
  return out;
}

}  // namespace

Finding replica_drift(const Observed& after, const Observed* before, const Observed* shares,
                      double unit) {
  Finding f{.signature = "replica_drift", .cause = Cause::unreduced_gradients};
  if (!after.entry.layout.is_replicate() || after.ranks.size() < 2) {
    f.evidence = "n/a: not a replicated tensor";
    return f;
  }
  const int ranks = static_cast<int>(after.ranks.size());
  double spread = 0;
  for (int r = 1; r < ranks; ++r) {
    for (std::size_t e = 0; e < after.ranks[0].size(); ++e) {
      spread = std::max(spread, std::fabs(after.ranks[r][e] - after.ranks[0][e]));
    }
  }
  if (spread == 0) {
    f.evidence = "the replicas of " + after.entry.tensor + " agree with each other";
    return f;
  }
  const std::string name = after.entry.tensor.substr(0, after.entry.tensor.find('@'));
  const std::string drift =
      "replicas of " + name + " differ (max " + num(spread) + " from rank 0's)";
  bool comparable = before && before->dense.size() == after.ranks[0].size() && shares &&
                    shares->ranks.size() == after.ranks.size();
  for (std::size_t r = 0; comparable && r < after.ranks.size(); ++r) {
    comparable = shares->ranks[r].size() == after.ranks[r].size();
  }
  if (!comparable) {
    f.confidence = 0.45;
    f.evidence = drift + "; no per-rank gradient to compare with";
    return f;
  }
  Values step(after.ranks.size());
  double before_max = 0;
  for (int r = 0; r < ranks; ++r) {
    for (std::size_t e = 0; e < before->dense.size(); ++e) {
      step[r].push_back(before->dense[e] - after.ranks[r][e]);
      before_max = std::max(before_max, std::fabs(before->dense[e]));
    }
  }
  double step_max = 0;
  for (const auto& s : step) {
    for (double v : s) step_max = std::max(step_max, std::fabs(v));
  }
  // The step is recovered as before - after: its rounding is relative to |before|, not |step|.
  const double tolerance = kFitUlps * unit * std::max(1.0, before_max / std::max(step_max, 1e-300));
  double lr = 0;
  if (fit_residual(step, shares->ranks, lr) <= tolerance) {
    f.confidence = 0.95;
    f.evidence = drift + "; each replica's step (before - after) = " + num(lr) +
                 " x its own rank's gradient share: the update used unreduced gradients";
    return f;
  }
  for (int g = 2; g < ranks; ++g) {
    if (ranks % g != 0) continue;
    const int stride = ranks / g;
    const std::pair<const char*, std::function<bool(int, int)>> layouts[] = {
        {"contiguous", [g](int r, int s) { return r / g == s / g; }},
        {"strided", [stride](int r, int s) { return r % stride == s % stride; }}};
    for (const auto& [name, member] : layouts) {
      if (fit_residual(step, group_sums(shares->ranks, member), lr) > tolerance) continue;
      f.confidence = 0.9;
      f.evidence = drift + "; each replica's step = " + num(lr) + " x the sum of its " + name +
                   " group of " + std::to_string(g) +
                   " ranks' shares: reduced over the wrong group";
      return f;
    }
  }
  f.confidence = 0.4;
  f.evidence = drift + "; the steps match no rank's or group's gradient share";
  return f;
}

}  // namespace shardsim
