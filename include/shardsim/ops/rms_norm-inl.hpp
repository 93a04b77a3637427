// Template bodies of ops/rms_norm.hpp.
#pragma once

#include <cmath>

#include "shardsim/ops/rms_norm.hpp"

namespace shardsim {

template <typename T>
void rms_norm_partial_sum_sq(const Tensor<T>& x, const RmsNormParams& params, std::int64_t valid,
                             Tensor<T>& sum_sq) {
  const AxisView view = AxisView::of(x.shape(), params.axis);
  SHARDSIM_ASSERT(valid >= 0 && valid <= view.extent, "valid positions out of range");
  sum_sq = Tensor<T>(x.shape().without(params.axis));
  for (std::int64_t o = 0; o < view.outer; ++o) {
    for (std::int64_t j = 0; j < view.inner; ++j) {
      T ss = T(0);
      for (std::int64_t i = 0; i < valid; ++i) {
        const T v = x[view.flat(o, i, j)];
        ss += v * v;
      }
      sum_sq[o * view.inner + j] = ss;
    }
  }
}

template <typename T>
void rms_norm_apply(const Tensor<T>& x, const Tensor<T>* weight, const RmsNormSaved<T>& saved,
                    const RmsNormParams& params, std::int64_t valid, Tensor<T>& y) {
  const AxisView view = AxisView::of(x.shape(), params.axis);
  SHARDSIM_ASSERT(valid >= 0 && valid <= view.extent, "valid positions out of range");
  y = Tensor<T>(x.shape());
  for (std::int64_t o = 0; o < view.outer; ++o) {
    for (std::int64_t j = 0; j < view.inner; ++j) {
      const T rrms = saved.rrms[o * view.inner + j];
      for (std::int64_t i = 0; i < valid; ++i) {
        const std::int64_t at = view.flat(o, i, j);
        T out = x[at] * rrms;
        if (weight) out = out * (*weight)[i];
        y[at] = out;
      }
    }
  }
}

template <typename T>
void rms_norm_forward(const Tensor<T>& x, const Tensor<T>* weight, const RmsNormParams& params,
                      Tensor<T>& y, RmsNormSaved<T>& saved) {
  using std::sqrt;
  const std::int64_t extent = x.shape().extent(params.axis);
  Tensor<T> sum_sq;
  rms_norm_partial_sum_sq(x, params, extent, sum_sq);
  const T count = T(extent);
  const T eps = T(params.eps);
  saved.rrms = Tensor<T>(sum_sq.shape());
  for (std::int64_t row = 0; row < sum_sq.numel(); ++row) {
    saved.rrms[row] = T(1) / sqrt(sum_sq[row] / count + eps);
  }
  rms_norm_apply(x, weight, saved, params, extent, y);
}

template <typename T>
void rms_norm_backward_sum(const Tensor<T>& dy, const Tensor<T>& x, const Tensor<T>* weight,
                           const RmsNormSaved<T>& saved, const RmsNormParams& params,
                           std::int64_t valid, Tensor<T>& sum_dnorm_norm) {
  const AxisView view = AxisView::of(x.shape(), params.axis);
  SHARDSIM_ASSERT(valid >= 0 && valid <= view.extent, "valid positions out of range");
  sum_dnorm_norm = Tensor<T>(x.shape().without(params.axis));
  for (std::int64_t o = 0; o < view.outer; ++o) {
    for (std::int64_t j = 0; j < view.inner; ++j) {
      const T rrms = saved.rrms[o * view.inner + j];
      T sum = T(0);
      for (std::int64_t i = 0; i < valid; ++i) {
        const std::int64_t at = view.flat(o, i, j);
        const T dnorm = weight ? dy[at] * (*weight)[i] : dy[at];
        sum += dnorm * (x[at] * rrms);
      }
      sum_dnorm_norm[o * view.inner + j] = sum;
    }
  }
}

template <typename T>
void rms_norm_backward_apply(const Tensor<T>& dy, const Tensor<T>& x, const Tensor<T>* weight,
                             const RmsNormSaved<T>& saved, const Tensor<T>& sum_dnorm_norm,
                             std::int64_t count, const RmsNormParams& params, std::int64_t valid,
                             Tensor<T>& dx, Tensor<T>* dweight) {
  const AxisView view = AxisView::of(x.shape(), params.axis);
  SHARDSIM_ASSERT(valid >= 0 && valid <= view.extent, "valid positions out of range");
  const T n = T(count);
  dx = Tensor<T>(x.shape());
  for (std::int64_t o = 0; o < view.outer; ++o) {
    for (std::int64_t j = 0; j < view.inner; ++j) {
      const std::int64_t row = o * view.inner + j;
      const T rrms = saved.rrms[row];
      const T dnorm_norm_mean = sum_dnorm_norm[row] / n;
      for (std::int64_t i = 0; i < valid; ++i) {
        const std::int64_t at = view.flat(o, i, j);
        const T norm = x[at] * rrms;
        const T dnorm = weight ? dy[at] * (*weight)[i] : dy[at];
        if (dweight) (*dweight)[i] += dy[at] * norm;
        // term 1: dnorm; term 2: - norm * mean(dnorm * norm) (through the statistic).
        dx[at] = (dnorm - norm * dnorm_norm_mean) * rrms;
      }
    }
  }
}

template <typename T>
void rms_norm_backward(const Tensor<T>& dy, const Tensor<T>& x, const Tensor<T>* weight,
                       const RmsNormSaved<T>& saved, const RmsNormParams& params, Tensor<T>& dx,
                       Tensor<T>* dweight) {
  const std::int64_t extent = x.shape().extent(params.axis);
  Tensor<T> sum_dnorm_norm;
  rms_norm_backward_sum(dy, x, weight, saved, params, extent, sum_dnorm_norm);
  rms_norm_backward_apply(dy, x, weight, saved, sum_dnorm_norm, extent, params, extent, dx,
                          dweight);
}

}  // namespace shardsim

// Explicit instantiation list, used by rms_norm.cpp (float, double) and rms_norm_mp.cpp.
#define SHARDSIM_INSTANTIATE_RMS_NORM(T)                                                       \
  template void rms_norm_forward(const Tensor<T>&, const Tensor<T>*, const RmsNormParams&,     \
                                 Tensor<T>&, RmsNormSaved<T>&);                                \
  template void rms_norm_backward(const Tensor<T>&, const Tensor<T>&, const Tensor<T>*,        \
                                  const RmsNormSaved<T>&, const RmsNormParams&, Tensor<T>&,    \
                                  Tensor<T>*);                                                 \
  template void rms_norm_partial_sum_sq(const Tensor<T>&, const RmsNormParams&, std::int64_t,  \
                                        Tensor<T>&);                                           \
  template void rms_norm_apply(const Tensor<T>&, const Tensor<T>*, const RmsNormSaved<T>&,     \
                               const RmsNormParams&, std::int64_t, Tensor<T>&);                \
  template void rms_norm_backward_sum(const Tensor<T>&, const Tensor<T>&, const Tensor<T>*,    \
                                      const RmsNormSaved<T>&, const RmsNormParams&,            \
                                      std::int64_t, Tensor<T>&);                               \
  template void rms_norm_backward_apply(const Tensor<T>&, const Tensor<T>&, const Tensor<T>*,  \
                                        const RmsNormSaved<T>&, const Tensor<T>&,              \
                                        std::int64_t, const RmsNormParams&, std::int64_t,      \
                                        Tensor<T>&, Tensor<T>*);
