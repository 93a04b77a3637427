#include "golden/golden_compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <sstream>

#include "core/error.hpp"
#include "core/narrow.hpp"
#include "core/placement.hpp"
#include "core/scalar.hpp"

namespace shardsim {

namespace {

constexpr std::size_t kNonfiniteExamples = 5;
constexpr double kInf = std::numeric_limits<double>::infinity();

struct Tolerance {
  double rtol = 0;
  double atol = 0;
  std::optional<double> max_ulp;
};

Tolerance tolerance_for(format::Dtype dtype, const CompareOptions& options) {
  if (options.precision) return {0, 0, std::nullopt};  // judged by the budget instead
  if (options.rtol || options.atol || options.max_ulp) {
    return {options.rtol.value_or(0), options.atol.value_or(0), options.max_ulp};
  }
  switch (dtype) {
    case format::Dtype::f32:
      return {1.3e-6, 1e-5, std::nullopt};
    case format::Dtype::f64:
      return {1e-7, 1e-7, std::nullopt};
    case format::Dtype::bf16:
      return {1.6e-2, 1e-5, std::nullopt};
    case format::Dtype::f16:
      return {1e-3, 1e-5, std::nullopt};
    default:
      return {0, 0, std::nullopt};  // masks and integers: exact
  }
}

// ULP distance of c from g in g's dtype.
double ulp_in(format::Dtype dtype, double g, double c) {
  if (std::isnan(g) || std::isnan(c)) return kInf;
  if (dtype == format::Dtype::f32) {
    return static_cast<double>(ulp_distance(static_cast<float>(g), static_cast<float>(c)));
  }
  if (dtype == format::Dtype::f64) return static_cast<double>(ulp_distance(g, c));
  if (dtype == format::Dtype::bf16 || dtype == format::Dtype::f16) {
    // The golden is a value of the format; the candidate is rounded to it once (from double:
    // exact for every candidate dtype but F64, which narrow_from_double rounds directly).
    const NarrowFormat format =
        dtype == format::Dtype::bf16 ? NarrowFormat::bf16 : NarrowFormat::f16;
    return static_cast<double>(narrow_ulp_distance(format, narrow_from_double(format, g),
                                                   narrow_from_double(format, c)));
  }
  return std::fabs(c - g);
}

// The candidate as compared with a golden of `info`'s dtype. A U16 candidate of a BF16 golden
// holds bf16 bit patterns (npy has no bf16: docs/goldens.md "bf16 in npy"). A BF16 or F16 golden
// needs a floating-point candidate otherwise: an integer or boolean one is bad input.
RawTensor candidate_as(const GoldenInfo& info, const RawTensor& candidate) {
  RawTensor out = candidate;
  const bool narrow = info.dtype == format::Dtype::bf16 || info.dtype == format::Dtype::f16;
  if (!narrow) return out;
  if (info.dtype == format::Dtype::bf16 && candidate.dtype == format::Dtype::u16) {
    out.dtype = format::Dtype::bf16;
    return out;
  }
  if (!format::dtype_info(candidate.dtype).is_float) {
    throw InputError("candidate tensor " + quote(candidate.name) + " is " +
                     std::string(format::dtype_info(candidate.dtype).safetensors) +
                     ", but golden " + quote(info.name) + " is " +
                     std::string(format::dtype_info(info.dtype).safetensors) +
                     ": expected a floating-point tensor (F16, BF16, F32, F64)" +
                     (info.dtype == format::Dtype::bf16 ? ", or U16 holding bf16 bit patterns"
                                                        : ""));
  }
  return out;
}

// Locates element `flat` of a golden tensor: its global index by named axis and its owner.
ElementReport locate(const GoldenInfo& info, std::int64_t flat) {
  ElementReport out;
  std::vector<Axis> axes;
  for (std::size_t a = 0; a < info.axes.size(); ++a) axes.push_back({info.axes[a], info.shape[a]});
  const std::vector<std::int64_t> local = unflatten(Shape(axes), flat);
  bool padding = false;
  for (std::size_t a = 0; a < local.size(); ++a) {
    std::int64_t global = local[a];
    auto offset = info.offset.find(info.axes[a]);
    if (offset != info.offset.end()) {
      // A shard's local index through its share (two runs for zigzag), padding past them.
      const Slice share =
          axis_slice(info.global_shape, info.layout, *info.mesh, info.rank, info.axes[a]);
      global = is_pad(share, global) ? offset->second + global : to_global(share, global);
    }
    const auto extent = info.global_shape.find(info.axes[a]);
    if (extent && global >= info.global_shape[*extent].extent) padding = true;
    out.index.emplace_back(info.axes[a], global);
  }
  if (info.rank >= 0) {
    out.owner = "rank " + std::to_string(info.rank) + (padding ? " (padding)" : "");
    return out;
  }
  const Layout& layout = info.layout;
  if (layout.is_replicate()) {
    out.owner = "every rank (Replicate)";
  } else if (layout.has_partial()) {
    out.owner = "sum over ranks (Partial)";
  } else {
    // The first rank whose share holds the element (its replicas on Replicate dims hold it too).
    out.owner = "rank ?";
    for (int r = 0; r < info.mesh->size() && out.owner == "rank ?"; ++r) {
      bool holds = true;
      for (const auto& [name, i] : out.index) {
        if (!info.global_shape.has(name)) continue;
        const Slice slice = axis_slice(info.global_shape, layout, *info.mesh, r, name);
        holds = holds && slice.holds(i);
      }
      if (holds) out.owner = "rank " + std::to_string(r);
    }
  }
  return out;
}

double max_finite_magnitude(const std::vector<double>& values) {
  double out = 0;
  for (double v : values) {
    if (std::isfinite(v)) out = std::max(out, std::fabs(v));
  }
  return out;
}

double ratio(double gap, double budget) {
  if (gap == 0) return 0;
  return budget > 0 ? gap / budget : kInf;
}

// The candidate's gaps (measured as a budget is: budget.hpp) against the budget.
BudgetJudgement judge_budget(NarrowFormat format, const TensorBudget& budget,
                             const TensorComparison& t) {
  BudgetJudgement out;
  out.budget = budget;
  out.allowed_normwise = allowed_normwise(format, budget.normwise);
  const double normwise = t.max_abs == 0 ? 0 : (t.scale > 0 ? t.max_abs / t.scale : kInf);
  out.gap = TensorBudget{normwise, t.max_ulp};
  out.normwise_ratio = ratio(out.gap.normwise, budget.normwise);
  out.ulp_ratio = ratio(out.gap.ulp, budget.ulp);
  out.noise = out.gap.normwise <= out.allowed_normwise;
  return out;
}

TensorComparison compare_tensor(const GoldenInfo& info, const RawTensor& golden,
                                const RawTensor& candidate, const CompareOptions& options) {
  TensorComparison out;
  out.golden = info.name;
  out.candidate = candidate.name;
  out.dtype = std::string(format::dtype_info(info.dtype).safetensors);
  out.shape = golden.shape;
  const Tolerance tol = tolerance_for(info.dtype, options);
  out.rtol = tol.rtol;
  out.atol = tol.atol;
  out.max_ulp_allowed = tol.max_ulp;
  if (candidate.shape != golden.shape) {
    auto str = [](const std::vector<std::int64_t>& s) {
      std::string o = "[";
      for (std::size_t i = 0; i < s.size(); ++i) o += (i ? ", " : "") + std::to_string(s[i]);
      return o + "]";
    };
    out.mismatch = "shape " + str(candidate.shape) + " in the candidate, " + str(golden.shape) +
                   " in the golden";
    out.pass = false;
    return out;
  }
  const std::vector<double> g = raw_values(golden);
  const std::vector<double> c = raw_values(candidate);
  // The worst element: the largest ULP distance; with --precision the largest |c - g|, the
  // element that sets the normwise gap the verdict reads (first of ties).
  double worst_key = -1;
  for (std::size_t e = 0; e < g.size(); ++e) {
    const double gv = g[e];
    const double cv = c[e];
    double abs_err, rel_err;
    bool within;
    if (std::isnan(gv) || std::isnan(cv)) {
      abs_err = rel_err = kInf;
      within = false;
    } else if (std::isinf(gv) || std::isinf(cv)) {
      within = gv == cv;
      abs_err = rel_err = within ? 0.0 : kInf;
    } else {
      abs_err = std::fabs(cv - gv);
      rel_err = gv == 0 ? (abs_err == 0 ? 0.0 : kInf) : abs_err / std::fabs(gv);
      within = abs_err <= tol.atol + tol.rtol * std::fabs(gv);
    }
    const double ulp = ulp_in(info.dtype, gv, cv);
    if (!within && tol.max_ulp && std::isfinite(gv) && std::isfinite(cv) && ulp <= *tol.max_ulp) {
      within = true;
    }
    auto element = [&] {  // this element, located, with its values and errors
      ElementReport r = locate(info, static_cast<std::int64_t>(e));
      r.golden = gv;
      r.candidate = cv;
      r.abs = abs_err;
      r.rel = rel_err;
      r.ulp = ulp;
      return r;
    };
    out.max_abs = std::max(out.max_abs, abs_err);
    out.max_rel = std::max(out.max_rel, rel_err);
    out.max_ulp = std::max(out.max_ulp, ulp);
    if (!within) ++out.outside;
    const bool nonfinite = !std::isfinite(cv) && !within;
    if (nonfinite) {
      ++out.nonfinite;
      if (out.nonfinite_examples.size() < kNonfiniteExamples) {
        out.nonfinite_examples.push_back(element());
      }
    }
    if (const double key = options.precision ? abs_err : ulp; key > worst_key) {
      worst_key = key;
      out.worst = element();
    }
  }
  out.scale = max_finite_magnitude(g);
  out.pass = out.outside == 0;
  if (options.precision) {
    SHARDSIM_ASSERT(info.budget.has_value(), "compare_candidate checked the budgets");
    out.budget = judge_budget(*options.precision, *info.budget, out);
    out.pass = out.budget->noise;
  }
  return out;
}

format::Dtype dtype_of(NarrowFormat format) {
  return format == NarrowFormat::bf16 ? format::Dtype::bf16 : format::Dtype::f16;
}

// --precision needs goldens of that format with budgets: bad input otherwise.
void check_budgets(const GoldenDir& golden, NarrowFormat format) {
  const std::string name = format == NarrowFormat::bf16 ? "bf16" : "f16";
  const std::string manifest = golden.path + "/manifest.json";
  const bool present = std::any_of(golden.infos.begin(), golden.infos.end(),
                                   [&](const GoldenInfo& i) { return i.dtype == dtype_of(format); });
  if (!present) {
    throw InputError(manifest + ": --precision " + name + ": the goldens have no " + name +
                     " tensors; write them with 'shardsim run SCENARIO --golden DIR --dtype " +
                     name + "' (or --dtype all)");
  }
  if (!golden.has_budgets) {
    throw InputError(manifest + ": --precision " + name +
                     ": the manifest has no error budgets (written by a shardsim that did not "
                     "record them); rewrite the goldens with this shardsim: 'shardsim run "
                     "SCENARIO --golden DIR --dtype " + name + "'");
  }
  if (auto why = golden.budgets_unavailable.find(name); why != golden.budgets_unavailable.end()) {
    throw InputError(manifest + ": --precision " + name + ": no " + name +
                     " error budgets: " + why->second);
  }
}

}  // namespace

ComparisonReport compare_candidate(const GoldenDir& golden, const Candidate& candidate,
                                   const CompareOptions& options) {
  ComparisonReport report;
  report.golden_precision = golden.precision;
  std::map<std::string, const RawTensor*> by_name;
  for (const RawTensor& t : candidate.tensors) by_name[t.name] = &t;
  std::map<std::string, std::string> mapped;
  for (const auto& [from, to] : options.map) {
    if (!golden.tensors.count(from)) {
      throw InputError("--map " + from + "=" + to + ": no golden tensor named " + quote(from));
    }
    if (!by_name.count(to)) {
      throw InputError("--map " + from + "=" + to + ": the candidate has no tensor named '" + to +
                       "'");
    }
    mapped[from] = to;
  }
  std::map<std::string, bool> used;
  if (options.precision) {
    check_budgets(golden, *options.precision);
    report.budget_precision = options.precision;
    report.budget_programs = golden.budget_programs;
  }
  for (const GoldenInfo& info : golden.infos) {
    if (options.precision && info.dtype != dtype_of(*options.precision)) continue;
    std::string key = info.name;
    if (auto m = mapped.find(info.name); m != mapped.end()) {
      key = m->second;
    } else if (candidate.is_npy_dir) {
      key = npy_file_name(info.name);
      key.resize(key.size() - 4);  // without ".npy"
    }
    auto found = by_name.find(key);
    if (found == by_name.end()) {
      report.golden_only.push_back(info.name);
      continue;
    }
    used[key] = true;
    report.tensors.push_back(compare_tensor(info, golden.tensors.at(info.name),
                                            candidate_as(info, *found->second), options));
    if (!report.tensors.back().pass) report.pass = false;
  }
  for (const RawTensor& t : candidate.tensors) {
    if (!used.count(t.name)) report.candidate_only.push_back(t.name);
  }
  if (report.tensors.empty()) {
    throw InputError(
        "no candidate tensor matches a golden name (goldens are named like '" +
        (golden.infos.empty() ? std::string("f32/s1/c1/y") : golden.infos.front().name) +
        "'); use --map GOLDEN=CANDIDATE");
  }
  return report;
}

}  // namespace shardsim
