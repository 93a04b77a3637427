// The terminal report of `shardsim compare` (golden_compare.hpp), readable in 100 columns:
// per tensor its metrics against the tolerances, or with --precision its verdict against the
// error budget (noise or bug, with the ratio), the worst element located, then a summary.
#include <cmath>
#include <cstdio>
#include <sstream>

#include "golden/golden_compare.hpp"

namespace shardsim {

namespace {
std::string num(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

std::string metric(double v) {
  if (v == 0) return "0";
  if (std::isinf(v)) return "inf";
  char buf[40];
  std::snprintf(buf, sizeof buf, v >= 1e6 || v < 1e-3 ? "%.2e" : "%.4g", v);
  return buf;
}

std::string element_str(const ElementReport& r) {
  std::string out = "[";
  for (std::size_t i = 0; i < r.index.size(); ++i) {
    out += (i ? ", " : "") + r.index[i].first + "=" + std::to_string(r.index[i].second);
  }
  return out + "] " + r.owner;
}

// "12.8x", "250x", "1.92e+38x", or "0x" / "inf x" at a budget of 0.
std::string times(double ratio) {
  if (std::isinf(ratio)) return "inf x";
  char buf[40];
  std::snprintf(buf, sizeof buf, ratio >= 1e6 ? "%.3gx" : ratio >= 100 ? "%.0fx" : "%.3gx", ratio);
  return buf;
}

// "normwise 0.0664: 15x the budget of correct programs (0.004425); noise up to 0.01666", then
// the ULP gap, reported and not judged (budget.hpp).
std::string budget_lines(const BudgetJudgement& j) {
  return "      normwise " + metric(j.gap.normwise) + ": " + times(j.normwise_ratio) +
         " the budget of correct programs (" + metric(j.budget.normwise) + "); noise up to " +
         metric(j.allowed_normwise) + (j.noise ? "" : "  OUTSIDE") + "\n      elementwise " +
         metric(j.gap.ulp) + " ulp (correct programs: up to " + metric(j.budget.ulp) +
         "; reported, not judged)\n";
}

}  // namespace

std::string format_comparison(const ComparisonReport& report) {
  std::ostringstream out;
  std::int64_t failed = 0;
  for (const TensorComparison& t : report.tensors) {
    if (!t.pass) ++failed;
    std::string shape = "[";
    for (std::size_t i = 0; i < t.shape.size(); ++i)
      shape += (i ? ", " : "") + std::to_string(t.shape[i]);
    shape += "]";
    const char* label = t.budget || (report.budget_precision && !t.mismatch.empty())
                            ? (t.pass ? "noise " : "bug   ")
                            : (t.pass ? "ok    " : "FAIL  ");
    out << label << t.golden;
    if (t.candidate != t.golden) out << "  (candidate '" << t.candidate << "')";
    out << "  " << t.dtype << " " << shape << "\n";
    if (!t.mismatch.empty()) {
      out << "      " << t.mismatch << "\n";
      continue;
    }
    std::int64_t numel = 1;
    for (std::int64_t d : t.shape) numel *= d;
    if (t.budget) {
      out << budget_lines(*t.budget);
    } else {
      out << "      max_abs " << metric(t.max_abs) << "  max_rel " << metric(t.max_rel)
        << "  max_ulp " << metric(t.max_ulp) << "  (" << t.outside << " of " << numel
        << " outside rtol " << metric(t.rtol) << ", atol " << metric(t.atol);
      if (t.max_ulp_allowed) out << ", max_ulp " << metric(*t.max_ulp_allowed);
      out << ")\n";
    }
    if (t.worst && t.max_ulp > 0) {
      out << "      worst " << element_str(*t.worst) << ": golden " << num(t.worst->golden)
          << ", candidate " << num(t.worst->candidate) << " (" << metric(t.worst->ulp) << " ulp)\n";
    }
    if (t.nonfinite > 0) {
      out << "      " << t.nonfinite << " non-finite candidate value(s):";
      for (const ElementReport& r : t.nonfinite_examples) {
        out << "\n        " << element_str(r) << ": " << num(r.candidate) << " (golden "
            << num(r.golden) << ")";
      }
      if (t.nonfinite > static_cast<std::int64_t>(t.nonfinite_examples.size()))
        out << "\n        ...";
      out << "\n";
    }
  }
  const std::size_t passed = report.tensors.size() - static_cast<std::size_t>(failed);
  if (report.budget_precision) {
    out << "judged " << report.tensors.size() << " tensor(s) against the "
        << (*report.budget_precision == NarrowFormat::bf16 ? "bf16" : "f16")
        << " error budgets of " << report.golden_precision << " goldens: " << passed
        << " noise, " << failed << " bug";
  } else {
    out << "compared " << report.tensors.size() << " tensor(s) against "
        << report.golden_precision << " goldens: " << passed << " within tolerance, " << failed
        << " outside";
  }
  if (!report.golden_only.empty())
    out << "; " << report.golden_only.size() << " golden tensor(s) not in the candidate";
  out << "\n";
  if (report.budget_precision) {
    out << "budgets: the largest gaps of correct programs (" << report.budget_programs << ")\n";
  }
  if (!report.candidate_only.empty()) {
    out << "candidate tensors with no golden counterpart (ignored; see --map):";
    for (const std::string& name : report.candidate_only) out << "\n  " << name;
    out << "\n";
  }
  return out.str();
}

}  // namespace shardsim
