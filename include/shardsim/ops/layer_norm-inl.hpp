// Template bodies of ops/layer_norm.hpp.
#pragma once

#include <cmath>

#include "shardsim/ops/layer_norm.hpp"
#include "shardsim/scalar.hpp"

namespace shardsim {

template <typename T>
void layer_norm_forward(const Tensor<T>& x, const Tensor<T>* weight, const Tensor<T>* bias,
                        const LayerNormParams& params, Tensor<T>& y, LayerNormSaved<T>& saved) {
  using std::sqrt;
  SHARDSIM_ASSERT(&x != &y, "layer_norm_forward: y must not be x");
  const AxisView view = AxisView::of(x.shape(), params.axis);
  const T count = T(view.extent);
  const T eps = T(params.eps);
  // Every element of y is written below, so its storage may be kept (tensor.hpp).
  prepare_output(y, x.shape());
  saved.mean = Tensor<T>(x.shape().without(params.axis));  // (rows)
  saved.rstd = Tensor<T>(x.shape().without(params.axis));  // (rows)
  // The per-element loops write through *_into into values made once per call, so an Mp run
  // allocates nothing per element here (scalar.hpp); the arithmetic is the header's formula.
  T sum = T(0);
  T sum_sq = T(0);
  T centered = T(0);
  T out = T(0);
  for (std::int64_t o = 0; o < view.outer; ++o) {
    for (std::int64_t j = 0; j < view.inner; ++j) {
      sum = T(0);
      for (std::int64_t i = 0; i < view.extent; ++i) add_into(sum, sum, x[view.flat(o, i, j)]);
      const T mean = sum / count;
      sum_sq = T(0);
      for (std::int64_t i = 0; i < view.extent; ++i) {
        sub_into(centered, x[view.flat(o, i, j)], mean);
        mul_into(centered, centered, centered);
        add_into(sum_sq, sum_sq, centered);
      }
      const T var = sum_sq / count;
      const T rstd = T(1) / sqrt(var + eps);
      for (std::int64_t i = 0; i < view.extent; ++i) {
        const std::int64_t at = view.flat(o, i, j);
        sub_into(out, x[at], mean);
        mul_into(out, out, rstd);
        if (weight) mul_into(out, out, (*weight)[i]);
        if (bias) add_into(out, out, (*bias)[i]);
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
  SHARDSIM_ASSERT(&dx != &x && &dx != &dy, "layer_norm_backward: dx must not be an input");
  const T count = T(view.extent);
  prepare_output(dx, x.shape());  // every element is written below
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

// ---- Building blocks for a row split over ranks ----

template <typename T>
void layer_norm_partial_sums(const Tensor<T>& x, const LayerNormParams& params, std::int64_t valid,
                             Tensor<T>& sum, Tensor<T>& sum_sq) {
  const AxisView view = AxisView::of(x.shape(), params.axis);
  SHARDSIM_ASSERT(valid >= 0 && valid <= view.extent, "valid positions out of range");
  sum = Tensor<T>(x.shape().without(params.axis));
  sum_sq = Tensor<T>(x.shape().without(params.axis));
  for (std::int64_t o = 0; o < view.outer; ++o) {
    for (std::int64_t j = 0; j < view.inner; ++j) {
      T s = T(0);
      T ss = T(0);
      for (std::int64_t i = 0; i < valid; ++i) {
        const T v = x[view.flat(o, i, j)];
        s += v;
        ss += v * v;
      }
      sum[o * view.inner + j] = s;
      sum_sq[o * view.inner + j] = ss;
    }
  }
}

template <typename T>
void layer_norm_partial_moments(const Tensor<T>& x, const LayerNormParams& params,
                                std::int64_t valid, Tensor<T>& mean, Tensor<T>& m2) {
  const AxisView view = AxisView::of(x.shape(), params.axis);
  SHARDSIM_ASSERT(valid >= 0 && valid <= view.extent, "valid positions out of range");
  mean = Tensor<T>(x.shape().without(params.axis));
  m2 = Tensor<T>(x.shape().without(params.axis));
  if (valid == 0) return;  // the empty triple (0, 0, 0)
  const T count = T(valid);
  for (std::int64_t o = 0; o < view.outer; ++o) {
    for (std::int64_t j = 0; j < view.inner; ++j) {
      T sum = T(0);
      for (std::int64_t i = 0; i < valid; ++i) sum += x[view.flat(o, i, j)];
      const T m = sum / count;
      T sum_sq = T(0);
      for (std::int64_t i = 0; i < valid; ++i) {
        const T centered = x[view.flat(o, i, j)] - m;
        sum_sq += centered * centered;
      }
      mean[o * view.inner + j] = m;
      m2[o * view.inner + j] = sum_sq;
    }
  }
}

template <typename T>
void welford_merge(T& count_a, T& mean_a, T& m2_a, const T& count_b, const T& mean_b,
                   const T& m2_b) {
  if (count_b == T(0)) return;
  if (count_a == T(0)) {
    count_a = count_b;
    mean_a = mean_b;
    m2_a = m2_b;
    return;
  }
  const T count = count_a + count_b;
  const T delta = mean_b - mean_a;
  mean_a = mean_a + delta * (count_b / count);
  m2_a = (m2_a + m2_b) + (delta * delta) * ((count_a * count_b) / count);
  count_a = count;
}

template <typename T>
void layer_norm_apply(const Tensor<T>& x, const Tensor<T>* weight, const Tensor<T>* bias,
                      const LayerNormSaved<T>& stats, const LayerNormParams& params,
                      std::int64_t valid, Tensor<T>& y) {
  const AxisView view = AxisView::of(x.shape(), params.axis);
  SHARDSIM_ASSERT(valid >= 0 && valid <= view.extent, "valid positions out of range");
  y = Tensor<T>(x.shape());
  for (std::int64_t o = 0; o < view.outer; ++o) {
    for (std::int64_t j = 0; j < view.inner; ++j) {
      const T mean = stats.mean[o * view.inner + j];
      const T rstd = stats.rstd[o * view.inner + j];
      for (std::int64_t i = 0; i < valid; ++i) {
        const std::int64_t at = view.flat(o, i, j);
        T out = (x[at] - mean) * rstd;
        if (weight) out = out * (*weight)[i];
        if (bias) out = out + (*bias)[i];
        y[at] = out;
      }
    }
  }
}

template <typename T>
void layer_norm_backward_sums(const Tensor<T>& dy, const Tensor<T>& x, const Tensor<T>* weight,
                              const LayerNormSaved<T>& stats, const LayerNormParams& params,
                              std::int64_t valid, Tensor<T>& sum_dnorm, Tensor<T>& sum_dnorm_norm) {
  const AxisView view = AxisView::of(x.shape(), params.axis);
  SHARDSIM_ASSERT(valid >= 0 && valid <= view.extent, "valid positions out of range");
  sum_dnorm = Tensor<T>(x.shape().without(params.axis));
  sum_dnorm_norm = Tensor<T>(x.shape().without(params.axis));
  for (std::int64_t o = 0; o < view.outer; ++o) {
    for (std::int64_t j = 0; j < view.inner; ++j) {
      const T mean = stats.mean[o * view.inner + j];
      const T rstd = stats.rstd[o * view.inner + j];
      T s = T(0);
      T sn = T(0);
      for (std::int64_t i = 0; i < valid; ++i) {
        const std::int64_t at = view.flat(o, i, j);
        const T norm = (x[at] - mean) * rstd;
        const T dnorm = weight ? dy[at] * (*weight)[i] : dy[at];
        s += dnorm;
        sn += dnorm * norm;
      }
      sum_dnorm[o * view.inner + j] = s;
      sum_dnorm_norm[o * view.inner + j] = sn;
    }
  }
}

template <typename T>
void layer_norm_backward_apply(const Tensor<T>& dy, const Tensor<T>& x, const Tensor<T>* weight,
                               const LayerNormSaved<T>& stats, const Tensor<T>& sum_dnorm,
                               const Tensor<T>& sum_dnorm_norm, std::int64_t count,
                               const LayerNormParams& params, std::int64_t valid, Tensor<T>& dx,
                               Tensor<T>* dweight, Tensor<T>* dbias) {
  const AxisView view = AxisView::of(x.shape(), params.axis);
  SHARDSIM_ASSERT(valid >= 0 && valid <= view.extent, "valid positions out of range");
  const T n = T(count);
  dx = Tensor<T>(x.shape());
  for (std::int64_t o = 0; o < view.outer; ++o) {
    for (std::int64_t j = 0; j < view.inner; ++j) {
      const std::int64_t row = o * view.inner + j;
      const T mean = stats.mean[row];
      const T rstd = stats.rstd[row];
      const T dnorm_mean = sum_dnorm[row] / n;
      const T dnorm_norm_mean = sum_dnorm_norm[row] / n;
      for (std::int64_t i = 0; i < valid; ++i) {
        const std::int64_t at = view.flat(o, i, j);
        const T norm = (x[at] - mean) * rstd;
        const T dnorm = weight ? dy[at] * (*weight)[i] : dy[at];
        if (dbias) (*dbias)[i] += dy[at];
        if (dweight) (*dweight)[i] += dy[at] * norm;
        // The dense kernel's terms: dnorm, - mean(dnorm), - norm * mean(dnorm * norm).
        dx[at] = ((dnorm - dnorm_mean) - norm * dnorm_norm_mean) * rstd;
      }
    }
  }
}

}  // namespace shardsim

// Explicit instantiation list, used by layer_norm.cpp (float, double) and layer_norm_mp.cpp.
#define SHARDSIM_INSTANTIATE_LAYER_NORM(T)                                                         \
  template void layer_norm_forward(const Tensor<T>&, const Tensor<T>*, const Tensor<T>*,           \
                                   const LayerNormParams&, Tensor<T>&, LayerNormSaved<T>&);        \
  template void layer_norm_backward(const Tensor<T>&, const Tensor<T>&, const Tensor<T>*,          \
                                    const LayerNormSaved<T>&, const LayerNormParams&, Tensor<T>&,  \
                                    Tensor<T>*, Tensor<T>*);                                       \
  template void layer_norm_partial_sums(const Tensor<T>&, const LayerNormParams&, std::int64_t,    \
                                        Tensor<T>&, Tensor<T>&);                                   \
  template void layer_norm_partial_moments(const Tensor<T>&, const LayerNormParams&, std::int64_t, \
                                           Tensor<T>&, Tensor<T>&);                                \
  template void welford_merge(T&, T&, T&, const T&, const T&, const T&);                           \
  template void layer_norm_apply(const Tensor<T>&, const Tensor<T>*, const Tensor<T>*,             \
                                 const LayerNormSaved<T>&, const LayerNormParams&, std::int64_t,   \
                                 Tensor<T>&);                                                      \
  template void layer_norm_backward_sums(const Tensor<T>&, const Tensor<T>&, const Tensor<T>*,     \
                                         const LayerNormSaved<T>&, const LayerNormParams&,         \
                                         std::int64_t, Tensor<T>&, Tensor<T>&);                    \
  template void layer_norm_backward_apply(const Tensor<T>&, const Tensor<T>&, const Tensor<T>*,    \
                                          const LayerNormSaved<T>&, const Tensor<T>&,              \
                                          const Tensor<T>&, std::int64_t, const LayerNormParams&,  \
                                          std::int64_t, Tensor<T>&, Tensor<T>*, Tensor<T>*);
