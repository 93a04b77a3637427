// capture_values: a boundary's values as the comparator captures them, and the magnitudes it
// measures them by (compare-inl.hpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "compare/compare.hpp"
#include "core/narrow_float.hpp"
#include "core/parallel.hpp"
#include "core/scalar.hpp"

namespace shardsim {

// Converts a tensor's values once to f32, f64, bf16 and f16 with correct rounding (and, at mp, dd
// and qd, to exact text). The mp branch is only instantiated where mp.hpp and mp_exact.hpp are
// included (compare_mp.cpp), the NarrowFloat one where narrow_float.hpp is (compare_narrow.cpp),
// the dd/qd one where qd_exact.hpp is (compare_dd.cpp, compare_qd.cpp). A dd/qd value near a rounding midpoint of
// a golden format (qd_exact.hpp) is flagged in near_midpoint. Without `exact` the exact text is
// left out (RunOptions::capture_exact).
template <typename T>
CapturedValues capture_values(const Tensor<T>& tensor, bool exact = true) {
  CapturedValues out;
  const auto n = static_cast<std::size_t>(tensor.numel());
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
  // Each value's conversions depend on it alone: chunks of values run concurrently
  // (parallel.hpp), each writing its own indices, so nothing depends on the thread count.
  out.f32.resize(n);
  out.f64.resize(n);
  out.bf16.resize(n);
  out.f16.resize(n);
  constexpr bool kExactText = !std::is_floating_point_v<T> && !std::is_same_v<T, NarrowFloat>;
  if (kExactText && exact) out.exact.resize(n);
  std::vector<std::uint8_t> flags(kIsExpansion<T> ? n : 0);
  const T* values = tensor.data();
  constexpr std::size_t kChunk = 4096;
  parallel_for(static_cast<std::int64_t>((n + kChunk - 1) / kChunk), [&](std::int64_t chunk) {
    const std::size_t last = std::min(n, (static_cast<std::size_t>(chunk) + 1) * kChunk);
    for (std::size_t i = static_cast<std::size_t>(chunk) * kChunk; i < last; ++i) {
      const T& v = values[i];
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        out.f32[i] = static_cast<float>(v);  // IEEE conversion: round to nearest even
        out.f64[i] = v;
        out.bf16[i] = narrow_from_double(NarrowFormat::bf16, v);
        out.f16[i] = narrow_from_double(NarrowFormat::f16, v);
      } else if constexpr (std::is_same_v<T, NarrowFloat>) {
        out.f32[i] = v.value();
        out.f64[i] = v.value();
        out.bf16[i] = narrow_from_float(NarrowFormat::bf16, v.value());
        out.f16[i] = narrow_from_float(NarrowFormat::f16, v.value());
      } else if constexpr (kIsExpansion<T>) {
        // Explicit template arguments: only the Expansion overloads are candidates (Mp's are
        // visible too wherever the world's transport, wire_mp.hpp, is).
        using R = typename T::Raw;
        out.f32[i] = round_to_f32<R>(v);
        out.f64[i] = round_to_f64<R>(v);
        out.bf16[i] = round_to_narrow<R>(v, NarrowFormat::bf16);
        out.f16[i] = round_to_narrow<R>(v, NarrowFormat::f16);
        if (exact) out.exact[i] = expansion_exact_text(v);
        flags[i] = near_midpoint_flags(v);
        if (v.term(0) != 0 && std::fabs(v.term(0)) <= residue) flags[i] = 0xf;  // every format
      } else {
        out.f32[i] = round_to_f32(v);
        out.f64[i] = round_to_f64(v);
        out.bf16[i] = round_to_narrow(v, NarrowFormat::bf16);
        out.f16[i] = round_to_narrow(v, NarrowFormat::f16);
        if (exact) out.exact[i] = mp_exact_text(v);
      }
    }
  });
  // near_midpoint stays empty when no value is flagged.
  if (std::any_of(flags.begin(), flags.end(), [](std::uint8_t f) { return f != 0; })) {
    out.near_midpoint = std::move(flags);
  }
  return out;
}

// The comparator's |v| and |s - d| (the difference rounded once in T, as the kernels subtract),
// each rounded to 53 bits with an unbounded exponent: at mp they do not underflow.
template <typename T>
Magnitude value_magnitude(const T& v) {
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
template <typename T>
Magnitude value_abs_difference(const T& s, const T& d) {
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

// max |v| over the tensor's finite values (Magnitude() when there is none): chunks of values
// concurrently (parallel.hpp), their maxima taken in chunk order, the first of equal values kept,
// as one sequential pass would.
template <typename T>
Magnitude max_finite_magnitude(const Tensor<T>& tensor) {
  constexpr std::int64_t kChunk = 8192;
  const std::int64_t chunks = (tensor.numel() + kChunk - 1) / kChunk;
  std::vector<Magnitude> maxima(static_cast<std::size_t>(chunks));
  parallel_for(chunks, [&](std::int64_t c) {
    Magnitude& max = maxima[static_cast<std::size_t>(c)];
    const std::int64_t last = std::min(tensor.numel(), (c + 1) * kChunk);
    for (std::int64_t e = c * kChunk; e < last; ++e) {
      const Magnitude m = value_magnitude(tensor[e]);
      if (m.is_finite() && max < m) max = m;
    }
  });
  Magnitude out;
  for (const Magnitude& m : maxima) {
    if (out < m) out = m;
  }
  return out;
}

// max over elements of sum_r |x_r,e| over the addends of each value, the magnitude a Partial
// tensor's sum is rounded at.
template <typename T>
double partial_addend_scale(const DistTensor<T>& sharded) {
  double out = 0;
  for (int r = 0; r < sharded.ranks(); ++r) {
    if (!represents_value(sharded, r)) continue;
    const std::vector<int> members = partial_members(sharded, r);
    for (std::int64_t e = 0; e < sharded.local(r).numel(); ++e) {
      double sum = 0;
      for (int m : members) sum += std::fabs(ScalarTraits<T>::to_double(sharded.local(m)[e]));
      if (std::isfinite(sum)) out = std::max(out, sum);
    }
  }
  return out;
}

}  // namespace shardsim
