// Seeded LayerNorm bugs, for the fault catalogue. Each is a scenario switch that changes the
// SHARDED plan only; the dense oracle never sees them. They exist to prove that the checker
// catches the ways sharded normalization commonly goes wrong (seed document 000).
//
// Where each applies (a fault switched on where it does not apply changes nothing):
//   combine_token_means       row-sharded plan: one mean for every token, all-reduced across
//                             the ranks' token means, instead of each token's own mean
//   rmsnorm_substituted       row-sharded plan: RMSNorm's statistic (no mean; rms) in place of
//                             mean and variance
//   hidden_shard_local_stats  hidden-sharded plans: each rank normalizes its slice of a token
//                             with statistics of that slice alone
//   unbiased_variance         all plans: variance divided by H - 1
//   eps_mismatch              all plans: eps outside the sqrt, rstd = 1 / (sqrt(var) + eps)
//   dtype_mismatch            row-sharded plan: the normalized value is rounded through float
//                             (invisible in an f32 run; a constant gap at f64 and mp)
// The redistribute mode of the hidden-sharded LayerNorm runs the row-sharded plan, so the
// row-plan faults apply there too.
#pragma once

#include <cmath>

#include "shardsim/ops/layer_norm.hpp"

namespace shardsim {

struct LayerNormFaults {
  bool combine_token_means = false;
  bool rmsnorm_substituted = false;
  bool hidden_shard_local_stats = false;
  bool unbiased_variance = false;
  bool eps_mismatch = false;
  bool dtype_mismatch = false;

  // Whether the row-sharded local pass must leave the dense kernel.
  bool changes_row_kernel() const {
    return combine_token_means || rmsnorm_substituted || unbiased_variance || eps_mismatch ||
           dtype_mismatch;
  }
};

namespace detail {

// rstd from a biased variance `var` (or the faulty substitutes) over a row of `count` features.
// `m2` is the row's sum of squared deviations, so both conventions can be formed from it.
template <typename T>
T faulty_rstd(const T& m2, std::int64_t count, double eps, const LayerNormFaults& faults) {
  using std::sqrt;
  const T var = m2 / T(faults.unbiased_variance ? count - 1 : count);
  return faults.eps_mismatch ? T(T(1) / (sqrt(var) + T(eps))) : T(T(1) / sqrt(var + T(eps)));
}

// The row-sharded local pass with the faults switched on, in the kernel's order otherwise.
// combined_mean: when non-null (combine_token_means), every row uses this one mean.
template <typename T>
void faulty_layer_norm_forward(const Tensor<T>& x, const Tensor<T>* weight, const Tensor<T>* bias,
                               const LayerNormParams& params, const LayerNormFaults& faults,
                               const T* combined_mean, Tensor<T>& y, LayerNormSaved<T>& saved) {
  const AxisView view = AxisView::of(x.shape(), params.axis);
  const T count = T(view.extent);
  y = Tensor<T>(x.shape());
  saved.mean = Tensor<T>(x.shape().without(params.axis));
  saved.rstd = Tensor<T>(x.shape().without(params.axis));
  for (std::int64_t o = 0; o < view.outer; ++o) {
    for (std::int64_t j = 0; j < view.inner; ++j) {
      T mean = T(0);
      if (combined_mean) {
        mean = *combined_mean;
      } else if (!faults.rmsnorm_substituted) {
        T sum = T(0);
        for (std::int64_t i = 0; i < view.extent; ++i) sum += x[view.flat(o, i, j)];
        mean = sum / count;
      }
      // With rmsnorm_substituted the mean stays 0, so m2 / H is RMSNorm's mean square.
      T m2 = T(0);
      for (std::int64_t i = 0; i < view.extent; ++i) {
        const T centered = x[view.flat(o, i, j)] - mean;
        m2 += centered * centered;
      }
      const T rstd = faulty_rstd(m2, view.extent, params.eps, faults);
      for (std::int64_t i = 0; i < view.extent; ++i) {
        const std::int64_t at = view.flat(o, i, j);
        T out = (x[at] - mean) * rstd;
        if (faults.dtype_mismatch) out = T(static_cast<float>(out));
        if (weight) out = out * (*weight)[i];
        if (bias) out = out + (*bias)[i];
        y[at] = out;
      }
      saved.mean[o * view.inner + j] = mean;
      saved.rstd[o * view.inner + j] = rstd;
    }
  }
}

}  // namespace detail

}  // namespace shardsim
