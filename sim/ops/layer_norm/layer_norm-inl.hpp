// Template bodies of ops/layer_norm.hpp. The forward and backward kernels run the per-block
// passes of layer_norm_blocks-inl.hpp over detail::for_each_row (norm_rows.hpp):
//   layer_norm_forward         block stats, then block apply, on each block
//   layer_norm_stats           block stats
//   layer_norm_apply           block apply
//   layer_norm_backward        block backward sums, then block backward apply, on each block
//   layer_norm_backward_sums   block backward sums
//   layer_norm_backward_apply  block backward apply
#pragma once

#include <cstdint>

#include "ops/layer_norm/layer_norm.hpp"
#include "ops/layer_norm/layer_norm_blocks-inl.hpp"
#include "ops/norm_rows.hpp"

namespace shardsim {

template <typename T>
void layer_norm_forward(const Tensor<T>& x, const Tensor<T>* weight, const Tensor<T>* bias,
                        const LayerNormParams& params, const LayerNormFaults& faults, Tensor<T>& y,
                        LayerNormSaved<T>& saved, const T* shared_mean) {
  const AxisView view = AxisView::of(x.shape(), params.axis);
  const auto policy = detail::layer_norm_stats_policy(view.extent, params, faults, shared_mean);
  prepare_output(y, x.shape());  // every element is written below (tensor.hpp)
  saved.mean = Tensor<T>(x.shape().without(params.axis));  // (rows)
  saved.rstd = Tensor<T>(x.shape().without(params.axis));  // (rows)
  // Each block's statistics, then its normalization while its rows are still in cache. The
  // statistics pass from one to the other in the block's own arrays (mean, rstd): read back from
  // saved, whose storage y's stores might alias as far as the compiler knows, the f32 loops run
  // markedly slower.
  detail::for_each_row_concurrently<detail::kConcurrentRowBlock<T>>(view, [&](const auto& block) {
    constexpr int n = detail::rows_in<decltype(block)>;
    detail::RowValues<T, n> mean, rstd;  // (n)
    detail::layer_norm_block_stats(block, x, view.extent, policy, mean, rstd);
    detail::layer_norm_block_apply(block, x, weight, bias, mean, rstd, faults, view.extent,
                                   view.extent, y, params.store);
    for (int q = 0; q < n; ++q) {
      saved.mean[block.row(q)] = mean[q];
      saved.rstd[block.row(q)] = rstd[q];
    }
  });
}

template <typename T>
void layer_norm_forward(const Tensor<T>& x, const Tensor<T>* weight, const Tensor<T>* bias,
                        const LayerNormParams& params, Tensor<T>& y, LayerNormSaved<T>& saved) {
  layer_norm_forward<T>(x, weight, bias, params, LayerNormFaults{}, y, saved, nullptr);
}

template <typename T>
void layer_norm_stats(const Tensor<T>& x, const LayerNormParams& params,
                      const LayerNormFaults& faults, LayerNormSaved<T>& stats,
                      const T* shared_mean) {
  const AxisView view = AxisView::of(x.shape(), params.axis);
  const auto policy = detail::layer_norm_stats_policy(view.extent, params, faults, shared_mean);
  stats.mean = Tensor<T>(x.shape().without(params.axis));  // (rows)
  stats.rstd = Tensor<T>(x.shape().without(params.axis));  // (rows)
  detail::for_each_row_concurrently<detail::kConcurrentRowBlock<T>>(view, [&](const auto& block) {
    constexpr int n = detail::rows_in<decltype(block)>;
    detail::RowValues<T, n> mean, rstd;  // (n)
    detail::layer_norm_block_stats(block, x, view.extent, policy, mean, rstd);
    for (int q = 0; q < n; ++q) {
      stats.mean[block.row(q)] = mean[q];
      stats.rstd[block.row(q)] = rstd[q];
    }
  });
}

template <typename T>
void layer_norm_apply(const Tensor<T>& x, const Tensor<T>* weight, const Tensor<T>* bias,
                      const LayerNormSaved<T>& stats, const LayerNormParams& params,
                      const LayerNormFaults& faults, std::int64_t valid, Tensor<T>& y) {
  SHARDSIM_ASSERT(&x != &y, "layer_norm_apply: y must not be x");
  const AxisView view = AxisView::of(x.shape(), params.axis);
  detail::require_valid_positions(view, valid);
  prepare_output(y, x.shape());  // every element is written below (tensor.hpp)
  detail::for_each_row_concurrently<detail::kConcurrentRowBlock<T>>(view, [&](const auto& block) {
    constexpr int n = detail::rows_in<decltype(block)>;
    detail::RowValues<T, n> mean, rstd;  // (n) local copies: stores into y cannot alias them
    for (int q = 0; q < n; ++q) {
      mean[q] = stats.mean[block.row(q)];
      rstd[q] = stats.rstd[block.row(q)];
    }
    detail::layer_norm_block_apply(block, x, weight, bias, mean, rstd, faults, valid, view.extent,
                                   y, params.store);
  });
}

template <typename T>
void layer_norm_backward(const Tensor<T>& dy, const Tensor<T>& x, const Tensor<T>* weight,
                         const LayerNormSaved<T>& saved, const LayerNormParams& params,
                         Tensor<T>& dx, Tensor<T>* dweight, Tensor<T>* dbias) {
  SHARDSIM_ASSERT(&dx != &x && &dx != &dy, "layer_norm_backward: dx must not be an input");
  const AxisView view = AxisView::of(x.shape(), params.axis);
  const T count = T(view.extent);
  prepare_output(dx, x.shape());  // every element is written below
  // Each block's two reductions, then its elementwise pass while its rows are still in cache;
  // the blocks go in row order, so dweight and dbias accumulate in row order.
  detail::for_each_row(view, [&](const auto& block) {
    constexpr int n = detail::rows_in<decltype(block)>;
    detail::RowValues<T, n> dnorm_mean, dnorm_norm_mean;  // (n) row sums, then row means
    detail::layer_norm_block_backward_sums(block, dy, x, weight, saved, view.extent, dnorm_mean,
                                           dnorm_norm_mean);
    for (int q = 0; q < n; ++q) {
      dnorm_mean[q] = dnorm_mean[q] / count;
      dnorm_norm_mean[q] = dnorm_norm_mean[q] / count;
    }
    detail::layer_norm_block_backward_apply(block, dy, x, weight, saved, dnorm_mean,
                                            dnorm_norm_mean, view.extent, view.extent, dx, dweight,
                                            dbias, params.store);
  });
}

template <typename T>
void layer_norm_backward_sums(const Tensor<T>& dy, const Tensor<T>& x, const Tensor<T>* weight,
                              const LayerNormSaved<T>& stats, const LayerNormParams& params,
                              std::int64_t valid, Tensor<T>& sum_dnorm, Tensor<T>& sum_dnorm_norm) {
  const AxisView view = AxisView::of(x.shape(), params.axis);
  detail::require_valid_positions(view, valid);
  sum_dnorm = Tensor<T>(x.shape().without(params.axis));       // (rows)
  sum_dnorm_norm = Tensor<T>(x.shape().without(params.axis));  // (rows)
  detail::for_each_row_concurrently<detail::kConcurrentRowBlock<T>>(view, [&](const auto& block) {
    constexpr int n = detail::rows_in<decltype(block)>;
    detail::RowValues<T, n> dnorm_total, dnorm_norm_total;  // (n)
    detail::layer_norm_block_backward_sums(block, dy, x, weight, stats, valid, dnorm_total,
                                           dnorm_norm_total);
    for (int q = 0; q < n; ++q) {
      sum_dnorm[block.row(q)] = dnorm_total[q];
      sum_dnorm_norm[block.row(q)] = dnorm_norm_total[q];
    }
  });
}

template <typename T>
void layer_norm_backward_apply(const Tensor<T>& dy, const Tensor<T>& x, const Tensor<T>* weight,
                               const LayerNormSaved<T>& stats, const Tensor<T>& sum_dnorm,
                               const Tensor<T>& sum_dnorm_norm, std::int64_t count,
                               const LayerNormParams& params, std::int64_t valid, Tensor<T>& dx,
                               Tensor<T>* dweight, Tensor<T>* dbias) {
  SHARDSIM_ASSERT(&dx != &x && &dx != &dy, "layer_norm_backward_apply: dx must not be an input");
  const AxisView view = AxisView::of(x.shape(), params.axis);
  detail::require_valid_positions(view, valid);
  const T row_length = T(count);
  prepare_output(dx, x.shape());  // every element is written below
  detail::for_each_row(view, [&](const auto& block) {
    constexpr int n = detail::rows_in<decltype(block)>;
    detail::RowValues<T, n> dnorm_mean, dnorm_norm_mean;  // (n)
    for (int q = 0; q < n; ++q) {
      dnorm_mean[q] = sum_dnorm[block.row(q)] / row_length;
      dnorm_norm_mean[q] = sum_dnorm_norm[block.row(q)] / row_length;
    }
    detail::layer_norm_block_backward_apply(block, dy, x, weight, stats, dnorm_mean,
                                            dnorm_norm_mean, valid, view.extent, dx, dweight, dbias,
                                            params.store);
  });
}

// ---- Building blocks for a row split over ranks ----

template <typename T>
void layer_norm_partial_sums(const Tensor<T>& x, const LayerNormParams& params, std::int64_t valid,
                             Tensor<T>& sum, Tensor<T>& sum_sq) {
  const AxisView view = AxisView::of(x.shape(), params.axis);
  detail::require_valid_positions(view, valid);
  sum = Tensor<T>(x.shape().without(params.axis));     // (rows)
  sum_sq = Tensor<T>(x.shape().without(params.axis));  // (rows)
  detail::for_each_row(view, [&](const auto& block) {
    constexpr int n = detail::rows_in<decltype(block)>;
    detail::RowValues<T, n> row_sum, row_sum_sq;  // (n)
    if constexpr (detail::kLaneSums<T>) {
      detail::with_row_stride(block, [&](auto unit) {
        detail::lane_sums_and_squares<decltype(unit)::value>(block, x.data(), valid, row_sum,
                                                             row_sum_sq);
      });
    } else {
      for (int q = 0; q < n; ++q) {
        row_sum[q] = T(0);
        row_sum_sq[q] = T(0);
      }
      T square = T(0);  // in place (scalar.hpp): no Mp temporary per element
      for (std::int64_t i = 0; i < valid; ++i) {
        for (int q = 0; q < n; ++q) {
          const T& value = x[block.at(q, i)];
          add_into(row_sum[q], row_sum[q], value);
          mul_into(square, value, value);
          add_into(row_sum_sq[q], row_sum_sq[q], square);
        }
      }
    }
    for (int q = 0; q < n; ++q) {
      sum[block.row(q)] = row_sum[q];
      sum_sq[block.row(q)] = row_sum_sq[q];
    }
  });
}

template <typename T>
void layer_norm_partial_moments(const Tensor<T>& x, const LayerNormParams& params,
                                std::int64_t valid, Tensor<T>& mean, Tensor<T>& m2) {
  const AxisView view = AxisView::of(x.shape(), params.axis);
  detail::require_valid_positions(view, valid);
  mean = Tensor<T>(x.shape().without(params.axis));  // (rows)
  m2 = Tensor<T>(x.shape().without(params.axis));    // (rows)
  if (valid == 0) return;                            // the empty triple (0, 0, 0)
  const T count = T(valid);
  detail::for_each_row(view, [&](const auto& block) {
    constexpr int n = detail::rows_in<decltype(block)>;
    detail::RowValues<T, n> row_sum, row_mean, row_m2;  // (n)
    if constexpr (detail::kLaneSums<T>) {
      detail::with_row_stride(block, [&](auto unit) {
        constexpr bool kUnit = decltype(unit)::value;
        detail::lane_sum_of<kUnit>(block, x.data(), valid, row_sum);
        for (int q = 0; q < n; ++q) row_mean[q] = row_sum[q] / count;
        detail::lane_centred_squares<kUnit>(block, x.data(), valid, row_mean, row_m2);
      });
    } else {
      for (int q = 0; q < n; ++q) row_sum[q] = T(0);
      for (std::int64_t i = 0; i < valid; ++i) {
        for (int q = 0; q < n; ++q) add_into(row_sum[q], row_sum[q], x[block.at(q, i)]);
      }
      for (int q = 0; q < n; ++q) {
        row_mean[q] = row_sum[q] / count;
        row_m2[q] = T(0);
      }
      T centered = T(0);  // in place (scalar.hpp): no Mp temporary per element
      for (std::int64_t i = 0; i < valid; ++i) {
        for (int q = 0; q < n; ++q) {
          sub_into(centered, x[block.at(q, i)], row_mean[q]);
          mul_into(centered, centered, centered);
          add_into(row_m2[q], row_m2[q], centered);
        }
      }
    }
    for (int q = 0; q < n; ++q) {
      mean[block.row(q)] = row_mean[q];
      m2[block.row(q)] = row_m2[q];
    }
  });
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

}  // namespace shardsim

// Explicit instantiation list: the op's .cpp instantiates float and double, and CMakeLists.txt
// finds this macro and generates the Mp, NarrowFloat, Dd and Qd units.
#define SHARDSIM_INSTANTIATE_LAYER_NORM(T)                                                         \
  template void layer_norm_forward(const Tensor<T>&, const Tensor<T>*, const Tensor<T>*,           \
                                   const LayerNormParams&, const LayerNormFaults&, Tensor<T>&,     \
                                   LayerNormSaved<T>&, const T*);                                  \
  template void layer_norm_forward(const Tensor<T>&, const Tensor<T>*, const Tensor<T>*,           \
                                   const LayerNormParams&, Tensor<T>&, LayerNormSaved<T>&);        \
  template void layer_norm_stats(const Tensor<T>&, const LayerNormParams&, const LayerNormFaults&, \
                                 LayerNormSaved<T>&, const T*);                                    \
  template void layer_norm_apply(const Tensor<T>&, const Tensor<T>*, const Tensor<T>*,             \
                                 const LayerNormSaved<T>&, const LayerNormParams&,                 \
                                 const LayerNormFaults&, std::int64_t, Tensor<T>&);                \
  template void layer_norm_backward(const Tensor<T>&, const Tensor<T>&, const Tensor<T>*,          \
                                    const LayerNormSaved<T>&, const LayerNormParams&, Tensor<T>&,  \
                                    Tensor<T>*, Tensor<T>*);                                       \
  template void layer_norm_backward_sums(const Tensor<T>&, const Tensor<T>&, const Tensor<T>*,     \
                                         const LayerNormSaved<T>&, const LayerNormParams&,         \
                                         std::int64_t, Tensor<T>&, Tensor<T>&);                    \
  template void layer_norm_backward_apply(const Tensor<T>&, const Tensor<T>&, const Tensor<T>*,    \
                                          const LayerNormSaved<T>&, const Tensor<T>&,              \
                                          const Tensor<T>&, std::int64_t, const LayerNormParams&,  \
                                          std::int64_t, Tensor<T>&, Tensor<T>*, Tensor<T>*);       \
  template void layer_norm_partial_sums(const Tensor<T>&, const LayerNormParams&, std::int64_t,    \
                                        Tensor<T>&, Tensor<T>&);                                   \
  template void layer_norm_partial_moments(const Tensor<T>&, const LayerNormParams&, std::int64_t, \
                                           Tensor<T>&, Tensor<T>&);                                \
  template void welford_merge(T&, T&, T&, const T&, const T&, const T&);
