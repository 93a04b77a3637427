// Private to the runner: FSDP's MixedPrecision (FsdpSpec::param_dtype, reduce_dtype;
// docs/layouts.md "Mixed precision"). Where a run rounds, on the ranks and on the oracle alike:
//   gather        each rank casts its master shard to param_dtype before the all-gather, so the
//                 gathered copy holds param_dtype values; the oracle's step reads its master
//                 parameter rounded the same way (a one-rank FSDP program with the same policy).
//                 The master shards and the oracle's masters are not touched.
//   gradient      the unsharded gradient autograd makes for a param_dtype parameter is in
//                 param_dtype: each rank's addend rounded, and the oracle's gradient; a Partial
//                 gradient on another mesh dim (tp) is all-reduced in param_dtype (each hop
//                 rounded, as NCCL adds a bf16 buffer in bf16).
//   reduce        the reduce-scatter on the fsdp dim adds in reduce_dtype: every addend rounded to
//                 it, then every hop's partial sum, in the world's reduce order (rank, ring or
//                 tree, mesh.hpp); the oracle's gradient (one addend) is rounded to it once.
//   update        the reduced shard widened (exactly) to the run's precision; SGD on the master.
// A dtype at least as wide as the run's precision rounds nothing (the run's own). Rounding is
// correct and done once from the run's value: float -> bf16/f16 (storage.hpp), double -> any
// (narrow_from_double, float(double)), mp -> any (mp.hpp's round_to_narrow, round_to_f32,
// round_to_f64; this header is included by runner_mp.cpp after mp.hpp). A hop's sum of two
// dtype values is formed at the run's precision and then rounded: innocuous double rounding (the
// run has >= 2p + 2 bits of the dtype's p), except reduce_dtype f64 below mp108.
#pragma once

#include <functional>
#include <optional>
#include <type_traits>

#include "core/narrow_float.hpp"
#include "core/scalar.hpp"
#include "core/storage.hpp"
#include "core/tensor.hpp"

namespace shardsim {

// The significand bits of the run's scalar T: 24 (float), 53 (double), more for mp.
template <typename T>
constexpr unsigned run_bits() {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, NarrowFloat>) return 24;
  if constexpr (std::is_same_v<T, double>) return 53;
  return 64;  // mp: at least 64 bits (kMinMpBits), wider than every dtype
}

// Whether `dtype` rounds a run in T: it is narrower than T.
template <typename T>
bool dtype_rounds(const std::optional<Precision>& dtype) {
  if constexpr (std::is_same_v<T, NarrowFloat>) return false;  // narrow runs of fsdp are refused
  return dtype && dtype->bits < run_bits<T>();
}

// `v` rounded to nearest-even in `dtype` (bf16, f16, f32 or f64), as a T. REQUIRES:
// dtype_rounds<T>(dtype).
template <typename T>
T round_to_dtype(const T& v, const Precision& dtype) {
  if constexpr (std::is_same_v<T, NarrowFloat>) {
    return v;
  } else if constexpr (std::is_same_v<T, float>) {
    return round_to_narrow(narrow_format(dtype), v);  // f32 and f64 do not round a float
  } else if constexpr (std::is_same_v<T, double>) {
    if (dtype.kind == ScalarKind::f32) return static_cast<double>(static_cast<float>(v));
    const NarrowFormat format = narrow_format(dtype);
    return narrow_to_float(format, narrow_from_double(format, v));
  } else {
    switch (dtype.kind) {
      case ScalarKind::f64:
        return T(round_to_f64(v));
      case ScalarKind::f32:
        return T(round_to_f32(v));
      default:
        return T(narrow_to_float(narrow_format(dtype), round_to_narrow(v, narrow_format(dtype))));
    }
  }
}

// Rounds every element in place when `dtype` rounds a run in T.
template <typename T>
void round_tensor_to(Tensor<T>& tensor, const std::optional<Precision>& dtype) {
  if (!dtype_rounds<T>(dtype)) return;
  for (T& v : tensor.values()) v = round_to_dtype(v, *dtype);
}

// The hop rounding for World::rounding_sums: empty when `dtype` rounds nothing.
template <typename T>
std::function<void(T&)> hop_rounding(const std::optional<Precision>& dtype) {
  if (!dtype_rounds<T>(dtype)) return {};
  const Precision p = *dtype;
  return [p](T& sum) { sum = round_to_dtype(sum, p); };
}

// The dtype's name ("bf16"), or the run's own.
inline std::string dtype_label(const std::optional<Precision>& dtype) {
  return dtype ? dtype->name() : std::string("the run's own");
}

}  // namespace shardsim
