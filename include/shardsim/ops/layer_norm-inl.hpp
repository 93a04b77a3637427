// Template bodies of ops/layer_norm.hpp.
#pragma once

#include <array>
#include <cmath>
#include <type_traits>

#include "shardsim/ops/layer_norm.hpp"
#include "shardsim/scalar.hpp"

namespace shardsim {

namespace detail {

// Rows reduced side by side: four rows' sums advance together, each still one accumulator over
// its own row in ascending order, so every result is bitwise what one row at a time gives; the
// four independent chains only keep the adder busy (a single sequential sum waits on its own
// latency). Calls f(first_row, std::integral_constant<int, N>) with N = 4, then 1 for the tail.
inline constexpr int kLayerNormRowBlock = 4;

template <typename F>
void for_row_blocks(std::int64_t rows, F&& f) {
  std::int64_t r = 0;
  for (; r + kLayerNormRowBlock <= rows; r += kLayerNormRowBlock) {
    f(r, std::integral_constant<int, kLayerNormRowBlock>{});
  }
  for (; r < rows; ++r) f(r, std::integral_constant<int, 1>{});
}

}  // namespace detail

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
  const std::int64_t step = view.inner;                    // row r: element i at base(r) + i * step
  detail::for_row_blocks(view.outer * view.inner, [&](std::int64_t r0, auto block) {
    constexpr int n = decltype(block)::value;
    // The per-element loops write through *_into into these values, made once per block, so
    // an Mp run allocates nothing per element here (scalar.hpp), and being the block's own
    // locals they stay in registers at f32/f64. The arithmetic is the header's formula.
    std::array<T, n> sum, sum_sq, centered, mean, rstd;
    T out = T(0);
    std::int64_t base[n];
    for (int q = 0; q < n; ++q) {
      base[q] = view.flat((r0 + q) / view.inner, 0, (r0 + q) % view.inner);
      sum[q] = T(0);
      sum_sq[q] = T(0);
    }
    for (std::int64_t i = 0; i < view.extent; ++i) {
      for (int q = 0; q < n; ++q) add_into(sum[q], sum[q], x[base[q] + i * step]);
    }
    for (int q = 0; q < n; ++q) mean[q] = sum[q] / count;
    for (std::int64_t i = 0; i < view.extent; ++i) {
      for (int q = 0; q < n; ++q) {
        sub_into(centered[q], x[base[q] + i * step], mean[q]);
        mul_into(centered[q], centered[q], centered[q]);
        add_into(sum_sq[q], sum_sq[q], centered[q]);
      }
    }
    for (int q = 0; q < n; ++q) {
      const T var = sum_sq[q] / count;
      rstd[q] = T(1) / sqrt(var + eps);
      for (std::int64_t i = 0; i < view.extent; ++i) {
        const std::int64_t at = base[q] + i * step;
        sub_into(out, x[at], mean[q]);
        mul_into(out, out, rstd[q]);
        if (weight) mul_into(out, out, (*weight)[i]);
        if (bias) add_into(out, out, (*bias)[i]);
        y[at] = out;
      }
      saved.mean[r0 + q] = mean[q];
      saved.rstd[r0 + q] = rstd[q];
    }
  });
}

template <typename T>
void layer_norm_backward(const Tensor<T>& dy, const Tensor<T>& x, const Tensor<T>* weight,
                         const LayerNormSaved<T>& saved, const LayerNormParams& params,
                         Tensor<T>& dx, Tensor<T>* dweight, Tensor<T>* dbias) {
  const AxisView view = AxisView::of(x.shape(), params.axis);
  SHARDSIM_ASSERT(&dx != &x && &dx != &dy, "layer_norm_backward: dx must not be an input");
  const T count = T(view.extent);
  prepare_output(dx, x.shape());  // every element is written below
  const std::int64_t step = view.inner;
  // The two row reductions run side by side over a block of rows (detail::for_row_blocks); the
  // elementwise pass then goes row by row, so dweight and dbias accumulate in row order.
  detail::for_row_blocks(view.outer * view.inner, [&](std::int64_t r0, auto block) {
    constexpr int n = decltype(block)::value;
    std::int64_t base[n];
    T mean[n], rstd[n], dnorm_sum[n], dnorm_norm_sum[n];
    for (int q = 0; q < n; ++q) {
      base[q] = view.flat((r0 + q) / view.inner, 0, (r0 + q) % view.inner);
      mean[q] = saved.mean[r0 + q];
      rstd[q] = saved.rstd[r0 + q];
      dnorm_sum[q] = T(0);
      dnorm_norm_sum[q] = T(0);
    }
    // Two reductions over each row: sum(dnorm) and sum(dnorm * norm).
    for (std::int64_t i = 0; i < view.extent; ++i) {
      for (int q = 0; q < n; ++q) {
        const std::int64_t at = base[q] + i * step;
        const T norm = (x[at] - mean[q]) * rstd[q];
        const T dnorm = weight ? dy[at] * (*weight)[i] : dy[at];
        dnorm_sum[q] += dnorm;
        dnorm_norm_sum[q] += dnorm * norm;
      }
    }
    for (int q = 0; q < n; ++q) {
      const T dnorm_mean = dnorm_sum[q] / count;
      const T dnorm_norm_mean = dnorm_norm_sum[q] / count;
      for (std::int64_t i = 0; i < view.extent; ++i) {
        const std::int64_t at = base[q] + i * step;
        const T norm = (x[at] - mean[q]) * rstd[q];
        const T dnorm = weight ? dy[at] * (*weight)[i] : dy[at];
        if (dbias) (*dbias)[i] += dy[at];
        if (dweight) (*dweight)[i] += dy[at] * norm;
        // term 1: dnorm; term 2: - mean(dnorm) (through the mean);
        // term 3: - norm * mean(dnorm * norm) (through the variance).
        dx[at] = ((dnorm - dnorm_mean) - norm * dnorm_norm_mean) * rstd[q];
      }
    }
  });
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
