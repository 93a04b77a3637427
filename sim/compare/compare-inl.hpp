// The comparator: a BoundarySink that measures every boundary against the oracle.
#pragma once

#include <cmath>
#include <limits>
#include <map>
#include <tuple>
#include <type_traits>

#include "shardsim/compare/compare.hpp"
#include "shardsim/narrow_float.hpp"
#include "shardsim/scalar.hpp"

namespace shardsim {

// Converts a tensor's values once to f32, f64, bf16 and f16 with correct rounding (and, at mp, dd
// and qd, to exact text). The mp branch is only instantiated where mp.hpp and mp_exact.hpp are
// included (compare_mp.cpp), the NarrowFloat one where narrow_float.hpp is (compare_narrow.cpp),
// the dd/qd one where qd_exact.hpp is (compare_qd.cpp). A dd/qd value near a rounding midpoint of
// a golden format (qd_exact.hpp) is flagged in near_midpoint.
template <typename T>
CapturedValues capture_values(const Tensor<T>& tensor) {
  CapturedValues out;
  const auto n = static_cast<std::size_t>(tensor.numel());
  out.f32.reserve(n);
  out.f64.reserve(n);
  out.bf16.reserve(n);
  out.f16.reserve(n);
  // dd/qd: a value below the error budget times the tensor's largest magnitude may be the residue
  // of a cancellation (a mathematical zero), whose relative error is unbounded: flagged as well.
  [[maybe_unused]] double residue = 0;
  if constexpr (kIsExpansion<T>) {
    for (const T& v : tensor.values()) {
      const double m = std::fabs(static_cast<double>(v.term(0)));
      if (std::isfinite(m)) residue = std::max(residue, m);
    }
    if (n > 0) residue = std::ldexp(residue, golden_error_budget_log2(tensor.values().front()));
  }
  for (const T& v : tensor.values()) {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      out.f32.push_back(static_cast<float>(v));  // IEEE conversion: round to nearest even
      out.f64.push_back(v);
      out.bf16.push_back(narrow_from_double(NarrowFormat::bf16, v));
      out.f16.push_back(narrow_from_double(NarrowFormat::f16, v));
    } else if constexpr (std::is_same_v<T, NarrowFloat>) {
      out.f32.push_back(v.value());
      out.f64.push_back(v.value());
      out.bf16.push_back(narrow_from_float(NarrowFormat::bf16, v.value()));
      out.f16.push_back(narrow_from_float(NarrowFormat::f16, v.value()));
    } else if constexpr (kIsExpansion<T>) {
      out.f32.push_back(round_to_f32(v));
      out.f64.push_back(round_to_f64(v));
      out.bf16.push_back(round_to_narrow(v, NarrowFormat::bf16));
      out.f16.push_back(round_to_narrow(v, NarrowFormat::f16));
      out.exact.push_back(expansion_exact_text(v));
      std::uint8_t flags = near_midpoint_flags(v);
      if (v.term(0) != 0 && std::fabs(v.term(0)) <= residue) flags = 0xf;  // every format
      if (flags) {
        out.near_midpoint.resize(n, 0);
        out.near_midpoint[out.f64.size() - 1] = flags;
      }
    } else {
      out.f32.push_back(round_to_f32(v));
      out.f64.push_back(round_to_f64(v));
      out.bf16.push_back(round_to_narrow(v, NarrowFormat::bf16));
      out.f16.push_back(round_to_narrow(v, NarrowFormat::f16));
      out.exact.push_back(mp_exact_text(v));
    }
  }
  return out;
}

template <typename T>
class Comparator final : public BoundarySink<T> {
 public:
  // `narrow`: a narrow run's format, in whose units a stored boundary's max_ulp is counted.
  explicit Comparator(Magnitude rtol, bool capture = false,
                      std::optional<NarrowFormat> narrow = std::nullopt)
      : rtol_(rtol), capture_(capture), narrow_(narrow) {}

  bool on_boundary(const TraceEntry& entry, const Tensor<T>* dense,
                   const DistTensor<T>& sharded) override {
    BoundaryResult result;
    result.entry = entry;
    result.rtol = rtol_;
    if (dense) measure(*dense, sharded, result);
    if (capture_) {
      auto captured = std::make_shared<CapturedBoundary>();
      captured->has_dense = dense != nullptr;
      if (dense) captured->dense = capture_values(*dense);
      for (int r = 0; r < sharded.ranks(); ++r) {
        captured->ranks.push_back(capture_values(sharded.local(r)));
      }
      result.captured = std::move(captured);
    }
    const bool identical = result.status == Status::exact;
    results_.push_back(std::move(result));
    return identical;
  }

  std::vector<BoundaryResult>& results() { return results_; }

  void on_activation_memory(const ActivationMemory& memory) override { activation_ = memory; }
  ActivationMemory& activation() { return activation_; }

 private:
  using Traits = ScalarTraits<T>;

  struct Element {
    int rank;
    std::int64_t global_flat;
    const T* sharded;
  };

  // Visits every compared element: (rank, global flat index, sharded value). Padding is
  // skipped; a Replicate dim's copies are each visited; the addends of Partial dims are summed
  // in rank order first, and the sum is visited at the rank that stands for it
  // (represents_value).
  template <typename Visit>
  static void for_each_element(const DistTensor<T>& sharded, Tensor<T>& partial_sum, Visit visit) {
    for (int r = 0; r < sharded.ranks(); ++r) {
      if (!represents_value(sharded, r)) continue;
      const Tensor<T>* local = &sharded.local(r);
      if (sharded.layout.has_partial()) {
        const std::vector<int> members = partial_members(sharded, r);
        partial_sum = sharded.local(members.front());
        for (std::size_t m = 1; m < members.size(); ++m) {
          const Tensor<T>& addend = sharded.local(members[m]);
          for (std::int64_t e = 0; e < partial_sum.numel(); ++e) partial_sum[e] += addend[e];
        }
        local = &partial_sum;
      }
      for_each_valid(local->shape(), local_box(sharded, r), sharded.global,
                     [&](std::int64_t local_flat, std::int64_t global_flat) {
                       visit(r, global_flat, (*local)[local_flat]);
                     });
    }
  }

  void measure(const Tensor<T>& dense, const DistTensor<T>& sharded, BoundaryResult& result) {
    SHARDSIM_ASSERT(dense.shape() == sharded.global, "boundary shape differs from the oracle's");
    Magnitude scale;
    for (std::int64_t e = 0; e < dense.numel(); ++e) {
      const Magnitude d = magnitude_of(dense[e]);
      if (d.is_finite()) raise(scale, d);
    }
    result.scale = scale;
    const Magnitude allowed = rtol_ * noise_scale(scale, sharded, result.entry);
    bool all_identical = true;
    bool all_within = true;
    std::optional<Divergence> first_not_identical;
    std::optional<Divergence> first_outside;
    Tensor<T> partial_sum;
    for_each_element(sharded, partial_sum, [&](int rank, std::int64_t flat, const T& s) {
      const T& d = dense[flat];
      if (Traits::identical(s, d)) return;
      const ElementError err = element_error(s, d);
      raise(result.max_abs, err.abs);
      raise(result.max_rel, err.rel);
      result.max_ulp = std::max(result.max_ulp, ulp(s, d, result.entry.narrow));
      if (all_identical) {
        all_identical = false;
        first_not_identical = divergence_at(
            dense, rank, flat, s,
            err.reason == "NaN" ? "NaN, which never matches"
                                : "not bitwise equal at a boundary that claims exactness");
      }
      if (!(err.abs <= allowed)) {
        if (all_within) first_outside = divergence_at(dense, rank, flat, s, err.reason);
        all_within = false;
      }
    });
    if (all_identical) {
      result.status = Status::exact;
    } else if (result.entry.exact) {
      result.status = Status::fail;
      result.first_bad = first_not_identical;
    } else if (all_within) {
      result.status = Status::within;
    } else {
      result.status = Status::fail;
      result.first_bad = first_outside;
    }
    if (result.first_bad) {
      Divergence& div = *result.first_bad;
      div.boundary = result.entry.id;
      div.step = result.entry.step;
      div.chunk = result.entry.chunk;
      div.micro = result.entry.micro;
      div.micro_count = result.entry.micro_count;
      div.op = result.entry.op;
      div.tensor = result.entry.tensor;
    }
  }

  // The noise scale: a value computed from a sum of Partial addends carries the rounding of the
  // addends' magnitudes, not of the (possibly cancelled) result's, so the tolerance is relative
  // to the larger of max |d| (`scale`) and the largest sum of absolute addends of any Partial
  // input (addend_scale). Without it a correct reduction of cancelling gradients (training near
  // convergence) fails a tolerance relative to its tiny result. A Partial boundary records its
  // own addend scale for the boundaries that read it.
  Magnitude noise_scale(Magnitude scale, const DistTensor<T>& sharded, const TraceEntry& entry) {
    Magnitude noise = scale;
    for (const std::string& input : entry.inputs) {
      auto found = addend_scale_.find(input);
      if (found != addend_scale_.end()) raise(noise, found->second);
    }
    if (sharded.layout.has_partial()) {
      const Magnitude own = Magnitude::of(partial_addend_scale(sharded));
      raise(noise, own);
      addend_scale_[entry.tensor] = own;
    }
    return noise;
  }

  // max into `into`, ignoring a NaN `value` as std::max(into, value) does (a NaN max_rel, from an
  // infinite or NaN oracle value, leaves the maximum as it was).
  static void raise(Magnitude& into, const Magnitude& value) {
    if (into < value) into = value;
  }

  // |v| and |s - d| (the difference rounded once in T, as the kernels subtract), each rounded to
  // 53 bits with an unbounded exponent: at mp they do not underflow.
  static Magnitude magnitude_of(const T& v) {
    if constexpr (std::is_floating_point_v<T>) {
      return Magnitude::of(static_cast<double>(v));
    } else if constexpr (std::is_same_v<T, NarrowFloat>) {
      return Magnitude::of(static_cast<double>(static_cast<float>(v)));
    } else if constexpr (kIsExpansion<T>) {
      return expansion_magnitude(v);
    } else {
      return mp_magnitude(v);
    }
  }
  static Magnitude abs_difference(const T& s, const T& d) {
    if constexpr (std::is_floating_point_v<T>) {
      return Magnitude::of(static_cast<double>(T(s - d)));
    } else if constexpr (std::is_same_v<T, NarrowFloat>) {
      return Magnitude::of(static_cast<double>(static_cast<float>(T(s - d))));
    } else if constexpr (kIsExpansion<T>) {
      return expansion_abs_difference(s, d);
    } else {
      return mp_abs_difference(s, d);
    }
  }

  // The error of one sharded value `s` against its dense value `d` (not bitwise equal).
  // rel = abs / |d|: inf for d = 0, NaN (ignored by raise) for an infinite or NaN d.
  struct ElementError {
    Magnitude abs;
    Magnitude rel;
    std::string reason;
  };
  static ElementError element_error(const T& s, const T& d) {
    using std::isinf;
    using std::isnan;
    ElementError err;
    if (isnan(s) || isnan(d)) {
      err.abs = Magnitude::infinity();
      err.reason = "NaN";
    } else if (isinf(s) || isinf(d)) {
      err.abs = s == d ? Magnitude() : Magnitude::infinity();
      err.reason = "infinity";
    } else {
      err.abs = abs_difference(s, d);
      err.reason = "outside tolerance";
    }
    const Magnitude dm = magnitude_of(d);
    err.rel = dm.is_zero() ? Magnitude::infinity() : err.abs / dm;
    return err;
  }

  // The divergence at dense element `flat` (rank `rank` holds `s`), located by named axes.
  static Divergence divergence_at(const Tensor<T>& dense, int rank, std::int64_t flat, const T& s,
                                  std::string why) {
    Divergence div;
    div.rank = rank;
    const std::vector<std::int64_t> index = unflatten(dense.shape(), flat);
    for (std::size_t a = 0; a < index.size(); ++a) {
      div.index.emplace_back(dense.shape()[a].name, index[a]);
    }
    set_values(div, dense[flat], s);
    div.reason = std::move(why);
    return div;
  }

  // max over elements of sum_r |x_r,e| over the addends of each value, the magnitude a
  // Partial tensor's sum is rounded at.
  static double partial_addend_scale(const DistTensor<T>& sharded) {
    double out = 0;
    for (int r = 0; r < sharded.ranks(); ++r) {
      if (!represents_value(sharded, r)) continue;
      const std::vector<int> members = partial_members(sharded, r);
      for (std::int64_t e = 0; e < sharded.local(r).numel(); ++e) {
        double sum = 0;
        for (int m : members) sum += std::fabs(Traits::to_double(sharded.local(m)[e]));
        if (std::isfinite(sum)) out = std::max(out, sum);
      }
    }
    return out;
  }

  static void set_values(Divergence& div, const T& dense, const T& sharded) {
    div.dense = Traits::to_double(dense);
    div.sharded = Traits::to_double(sharded);
    if constexpr (kIsExpansion<T>) {
      std::tie(div.dense_text, div.sharded_text) = expansion_distinguishing_texts(dense, sharded);
    } else if constexpr (!std::is_floating_point_v<T> && !std::is_same_v<T, NarrowFloat>) {
      // mp: the doubles may print alike
      std::tie(div.dense_text, div.sharded_text) = distinguishing_texts(dense, sharded);
    }
  }

  // ULP distance in the run's scalar type, or in the narrow format for a stored boundary.
  double ulp(const T& s, const T& d, bool stored_narrow) const {
    if (!narrow_ || !stored_narrow) return Traits::ulp(s, d);
    const std::uint64_t units =
        narrow_ulp_distance(*narrow_, narrow_from_double(*narrow_, Traits::to_double(s)),
                            narrow_from_double(*narrow_, Traits::to_double(d)));
    return units == UINT64_MAX ? static_cast<double>(kUlpNaN) : static_cast<double>(units);
  }

  static T magnitude(const T& v) {
    using std::abs;
    return abs(v);
  }

  Magnitude rtol_;
  bool capture_;
  std::optional<NarrowFormat> narrow_;
  std::map<std::string, Magnitude> addend_scale_;  // Partial tensor -> partial_addend_scale
  std::vector<BoundaryResult> results_;
  ActivationMemory activation_;
};

template <typename T>
RunReport evaluate_at(const Scenario& scenario, const Precision& precision,
                      unsigned significand_bits, const RunOptions& options) {
  std::optional<NarrowFormat> storage;
  if (precision.is_narrow()) storage = narrow_format(precision);
  Comparator<T> comparator(scenario.rtol(precision), options.capture_tensors, storage);
  run_scenario<T>(scenario, options, comparator, storage);
  RunReport report;
  report.scenario = scenario.name;
  report.precision = precision;
  if (storage) report.accumulate = options.accumulate.value_or(scenario.accumulate);
  report.significand_bits = significand_bits;
  report.reduce_order = effective_reduce_order(scenario, options);
  report.schedule = effective_schedule(scenario, options);
  report.boundaries = std::move(comparator.results());
  report.activation = std::move(comparator.activation());
  for (const BoundaryResult& b : report.boundaries) {
    if (b.status == Status::fail) {
      report.pass = false;
      if (!report.first_divergence) report.first_divergence = b.first_bad;
    }
  }
  return report;
}

}  // namespace shardsim
