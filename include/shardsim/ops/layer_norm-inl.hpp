// Template bodies of ops/layer_norm.hpp.
#pragma once

#include <cmath>

#include "shardsim/ops/layer_norm.hpp"

namespace shardsim {

template <typename T>
void layer_norm_forward(const Tensor<T>& x, const Tensor<T>* weight, const Tensor<T>* bias,
                        const LayerNormParams& params, Tensor<T>& y, LayerNormSaved<T>& saved) {
  using std::sqrt;
  const AxisView view = AxisView::of(x.shape(), params.axis);
  const T count = T(view.extent);
  const T eps = T(params.eps);
  y = Tensor<T>(x.shape());
  saved.mean = Tensor<T>(x.shape().without(params.axis));  // (rows)
  saved.rstd = Tensor<T>(x.shape().without(params.axis));  // (rows)
  for (std::int64_t o = 0; o < view.outer; ++o) {
    for (std::int64_t j = 0; j < view.inner; ++j) {
      T sum = T(0);
      for (std::int64_t i = 0; i < view.extent; ++i) sum += x[view.flat(o, i, j)];
      const T mean = sum / count;
      T sum_sq = T(0);
      for (std::int64_t i = 0; i < view.extent; ++i) {
        const T centered = x[view.flat(o, i, j)] - mean;
        sum_sq += centered * centered;
      }
      const T var = sum_sq / count;
      const T rstd = T(1) / sqrt(var + eps);
      for (std::int64_t i = 0; i < view.extent; ++i) {
        const std::int64_t at = view.flat(o, i, j);
        T out = (x[at] - mean) * rstd;
        if (weight) out = out * (*weight)[i];
        if (bias) out = out + (*bias)[i];
        y[at] = out;
      }
      saved.mean[o * view.inner + j] = mean;
      saved.rstd[o * view.inner + j] = rstd;
    }
  }
}

template <typename T>
void layer_norm_backward(const Tensor<T>& dy, const Tensor<T>& x, const Tensor<T>* weight,
                         const LayerNormSaved<T>& saved, const LayerNormParams& params,
                         Tensor<T>& dx, Tensor<T>* dweight, Tensor<T>* dbias) {
  const AxisView view = AxisView::of(x.shape(), params.axis);
  const T count = T(view.extent);
  dx = Tensor<T>(x.shape());
  for (std::int64_t o = 0; o < view.outer; ++o) {
    for (std::int64_t j = 0; j < view.inner; ++j) {
      const T mean = saved.mean[o * view.inner + j];
      const T rstd = saved.rstd[o * view.inner + j];
      // Two reductions over the row: mean(dnorm) and mean(dnorm * norm).
      T dnorm_sum = T(0);
      T dnorm_norm_sum = T(0);
      for (std::int64_t i = 0; i < view.extent; ++i) {
        const std::int64_t at = view.flat(o, i, j);
        const T norm = (x[at] - mean) * rstd;
        const T dnorm = weight ? dy[at] * (*weight)[i] : dy[at];
        dnorm_sum += dnorm;
        dnorm_norm_sum += dnorm * norm;
      }
      const T dnorm_mean = dnorm_sum / count;
      const T dnorm_norm_mean = dnorm_norm_sum / count;
      for (std::int64_t i = 0; i < view.extent; ++i) {
        const std::int64_t at = view.flat(o, i, j);
        const T norm = (x[at] - mean) * rstd;
        const T dnorm = weight ? dy[at] * (*weight)[i] : dy[at];
        if (dbias) (*dbias)[i] += dy[at];
        if (dweight) (*dweight)[i] += dy[at] * norm;
        // term 1: dnorm; term 2: - mean(dnorm) (through the mean);
        // term 3: - norm * mean(dnorm * norm) (through the variance).
        dx[at] = ((dnorm - dnorm_mean) - norm * dnorm_norm_mean) * rstd;
      }
    }
  }
}

}  // namespace shardsim

// Explicit instantiation list, used by layer_norm.cpp (float, double) and layer_norm_mp.cpp.
#define SHARDSIM_INSTANTIATE_LAYER_NORM(T)                                                     \
  template void layer_norm_forward(const Tensor<T>&, const Tensor<T>*, const Tensor<T>*,       \
                                   const LayerNormParams&, Tensor<T>&, LayerNormSaved<T>&);    \
  template void layer_norm_backward(const Tensor<T>&, const Tensor<T>&, const Tensor<T>*,      \
                                    const LayerNormSaved<T>&, const LayerNormParams&,          \
                                    Tensor<T>&, Tensor<T>*, Tensor<T>*);
