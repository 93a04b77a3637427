// capture_values: a boundary's values as the comparator captures them (compare-inl.hpp).
#pragma once

#include <type_traits>

#include "shardsim/compare/compare.hpp"
#include "shardsim/narrow_float.hpp"
#include "shardsim/scalar.hpp"

namespace shardsim {

// Converts a tensor's values once to f32, f64, bf16 and f16 with correct rounding (and, at mp,
// to exact text). The mp branch is only instantiated where mp.hpp and mp_exact.hpp are included
// (compare_mp.cpp), the NarrowFloat one where narrow_float.hpp is (compare_narrow.cpp).
template <typename T>
CapturedValues capture_values(const Tensor<T>& tensor) {
  CapturedValues out;
  const auto n = static_cast<std::size_t>(tensor.numel());
  out.f32.reserve(n);
  out.f64.reserve(n);
  out.bf16.reserve(n);
  out.f16.reserve(n);
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

}  // namespace shardsim
