// RMSNorm over one named axis (Zhang, Sennrich 2019), per-rank kernel and dense oracle.
//
// For each row r (every position of the other axes), with H = extent of `axis`:
//   ms_r   = (sum_i x_ri^2) / H                  sum in ascending i; NO mean is subtracted
//   rrms_r = 1 / sqrt(ms_r + eps)                eps inside the sqrt
//   y_ri   = (x_ri * rrms_r) * w_i
// RMSNorm is its own op with its own statistic: it saves `rrms` (RmsNormSaved), LayerNorm saves
// `mean` and `rstd` (LayerNormSaved). The step records them as "<out>.rrms" versus "<out>.mean"
// and "<out>.rstd", so an RMSNorm result can never be compared against a LayerNorm oracle by
// accident: the names, the types and (on any input with a nonzero row mean) the values differ.
//
// Rows are visited through detail::for_each_row (norm_rows.hpp), several side by side, each
// still reduced alone in ascending order.
//
// The second half holds the hidden-sharded building blocks: a partial sum of squares over
// positions [0, valid) and the passes given the full-row statistic. The reductions sum over
// [0, valid) in ascending position order; the elementwise passes write 0 at the positions after
// it (a padded slice's pad positions). REQUIRES: 0 <= valid <= H.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/tensor.hpp"

namespace shardsim {

// The parts an RMSNorm step records besides its output, named part_name(output, part)
// (trace.hpp) by the plan and by the step that stores the oracle tensor.
namespace rms_norm_parts {
inline constexpr std::string_view rrms = "rrms";  // (rows) saved statistic
// Hidden-sharded: the all-reduced per-row sum of squares.
inline constexpr std::string_view sum_sq = "sumsq";  // (rows)
// Hidden-sharded backward: the all-reduced row reduction, a part of grad(output).
inline constexpr std::string_view sum_dnorm_norm = "sum_dnorm_norm";  // (rows)
}  // namespace rms_norm_parts

struct RmsNormParams {
  std::string axis = "hidden";
  double eps = 1e-5;  // f32 runs use float(eps); f64 and mp use this double exactly
};

// What forward keeps for backward: (rows) = x.shape().without(axis).
template <typename T>
struct RmsNormSaved {
  Tensor<T> rrms;  // (rows) 1 / sqrt(mean(x^2) + eps)
};

// The statistic of one row from its sum of squares over `count` features:
//   rrms = 1 / sqrt(sum_sq / count + eps).
// The one place the formula is written: the kernel and the hidden-sharded plan both call it.
template <typename T>
T rms_norm_rrms(const T& sum_sq, const T& count, const T& eps) {
  using std::sqrt;
  return T(1) / sqrt(sum_sq / count + eps);
}

// x: (..., H, ...) -> y same shape. weight: (H) or null. RMSNorm has no bias.
// rms_norm_partial_sum_sq over whole rows, rms_norm_rrms per row, then rms_norm_apply. y may be x.
template <typename T>
void rms_norm_forward(const Tensor<T>& x, const Tensor<T>* weight, const RmsNormParams& params,
                      Tensor<T>& y, RmsNormSaved<T>& saved);

// dx is written; dweight accumulates (+=). dweight may be null. rms_norm_backward_sum then
// rms_norm_backward_apply over whole rows.
//   norm_i = x_i * rrms,  dnorm_i = dy_i * w_i,
//   dx_i   = (dnorm_i - norm_i * mean_j(dnorm_j * norm_j)) * rrms
// (d rrms / d x_j = -rrms^3 x_j / H, so the second term is the path through the statistic.)
template <typename T>
void rms_norm_backward(const Tensor<T>& dy, const Tensor<T>& x, const Tensor<T>* weight,
                       const RmsNormSaved<T>& saved, const RmsNormParams& params, Tensor<T>& dx,
                       Tensor<T>* dweight);

// ---- Building blocks for a row split over ranks ----

// Per row: sum_sq = sum_i x_i^2 over [0, valid), ascending. (rows), written.
template <typename T>
void rms_norm_partial_sum_sq(const Tensor<T>& x, const RmsNormParams& params, std::int64_t valid,
                             Tensor<T>& sum_sq);

// y = (x * rrms) * w on [0, valid), 0 elsewhere. weight: (H), the local (H_local) slice, or
// null. y may be x (in place: each element is read before it is overwritten).
template <typename T>
void rms_norm_apply(const Tensor<T>& x, const Tensor<T>* weight, const RmsNormSaved<T>& saved,
                    const RmsNormParams& params, std::int64_t valid, Tensor<T>& y);

// Per row: sum_i dnorm_i * norm_i over [0, valid), ascending. (rows), written.
template <typename T>
void rms_norm_backward_sum(const Tensor<T>& dy, const Tensor<T>& x, const Tensor<T>* weight,
                           const RmsNormSaved<T>& saved, const RmsNormParams& params,
                           std::int64_t valid, Tensor<T>& sum_dnorm_norm);

// Given the full-row sum and row length `count`: dx on [0, valid) (0 elsewhere); dweight +=,
// over the rows in ascending row order. REQUIRES: dx is not an input.
template <typename T>
void rms_norm_backward_apply(const Tensor<T>& dy, const Tensor<T>& x, const Tensor<T>* weight,
                             const RmsNormSaved<T>& saved, const Tensor<T>& sum_dnorm_norm,
                             std::int64_t count, const RmsNormParams& params, std::int64_t valid,
                             Tensor<T>& dx, Tensor<T>* dweight);

}  // namespace shardsim
