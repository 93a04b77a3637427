// Template bodies of ops/rms_norm.hpp. Every row loop goes through detail::for_each_row
// (norm_rows.hpp).
#pragma once

#include <cstdint>

#include "core/scalar.hpp"
#include "ops/norm_rows.hpp"
#include "ops/rms_norm/rms_norm.hpp"

namespace shardsim {

template <typename T>
void rms_norm_partial_sum_sq(const Tensor<T>& x, const RmsNormParams& params, std::int64_t valid,
                             Tensor<T>& sum_sq) {
  const AxisView view = AxisView::of(x.shape(), params.axis);
  detail::require_valid_positions(view, valid);
  sum_sq = Tensor<T>(x.shape().without(params.axis));  // (rows)
  detail::for_each_row(view, [&](const auto& block) {
    constexpr int n = detail::rows_in<decltype(block)>;
    detail::RowValues<T, n> row_sum_sq;  // (n)
    for (int q = 0; q < n; ++q) row_sum_sq[q] = T(0);
    T square = T(0);  // in place (scalar.hpp): no Mp temporary per element
    for (std::int64_t i = 0; i < valid; ++i) {
      for (int q = 0; q < n; ++q) {
        const T& value = x[block.at(q, i)];
        mul_into(square, value, value);
        add_into(row_sum_sq[q], row_sum_sq[q], square);
      }
    }
    for (int q = 0; q < n; ++q) sum_sq[block.row(q)] = row_sum_sq[q];
  });
}

template <typename T>
void rms_norm_apply(const Tensor<T>& x, const Tensor<T>* weight, const RmsNormSaved<T>& saved,
                    const RmsNormParams& params, std::int64_t valid, Tensor<T>& y) {
  const AxisView view = AxisView::of(x.shape(), params.axis);
  detail::require_valid_positions(view, valid);
  prepare_output(y, x.shape());  // every element is written below (tensor.hpp)
  detail::for_each_row(view, [&](const auto& block) {
    constexpr int n = detail::rows_in<decltype(block)>;
    for (int q = 0; q < n; ++q) {
      const T rrms = saved.rrms[block.row(q)];  // a local copy: stores into y cannot alias it
      T out = T(0);  // in place (scalar.hpp): no Mp temporary per element
      for (std::int64_t i = 0; i < valid; ++i) {
        const std::int64_t at = block.at(q, i);
        mul_into(out, x[at], rrms);
        if (weight) mul_into(out, out, (*weight)[i]);
        y[at] = out;
      }
      for (std::int64_t i = valid; i < view.extent; ++i) y[block.at(q, i)] = T(0);
    }
  });
}

template <typename T>
void rms_norm_forward(const Tensor<T>& x, const Tensor<T>* weight, const RmsNormParams& params,
                      Tensor<T>& y, RmsNormSaved<T>& saved) {
  const std::int64_t extent = x.shape().extent(params.axis);
  Tensor<T> sum_sq;  // (rows)
  rms_norm_partial_sum_sq(x, params, extent, sum_sq);
  const T count = T(extent);
  const T eps = T(params.eps);
  saved.rrms = Tensor<T>(sum_sq.shape());  // (rows)
  for (std::int64_t row = 0; row < sum_sq.numel(); ++row) {
    saved.rrms[row] = rms_norm_rrms(sum_sq[row], count, eps);
  }
  rms_norm_apply(x, weight, saved, params, extent, y);
}

template <typename T>
void rms_norm_backward_sum(const Tensor<T>& dy, const Tensor<T>& x, const Tensor<T>* weight,
                           const RmsNormSaved<T>& saved, const RmsNormParams& params,
                           std::int64_t valid, Tensor<T>& sum_dnorm_norm) {
  const AxisView view = AxisView::of(x.shape(), params.axis);
  detail::require_valid_positions(view, valid);
  sum_dnorm_norm = Tensor<T>(x.shape().without(params.axis));  // (rows)
  detail::for_each_row(view, [&](const auto& block) {
    constexpr int n = detail::rows_in<decltype(block)>;
    detail::RowValues<T, n> rrms, dnorm_norm_total;  // (n)
    for (int q = 0; q < n; ++q) {
      rrms[q] = saved.rrms[block.row(q)];
      dnorm_norm_total[q] = T(0);
    }
    T dnorm = T(0), norm = T(0);  // in place (scalar.hpp): no Mp temporary per element
    for (std::int64_t i = 0; i < valid; ++i) {
      for (int q = 0; q < n; ++q) {
        const std::int64_t at = block.at(q, i);
        if (weight) {
          mul_into(dnorm, dy[at], (*weight)[i]);
        } else {
          dnorm = dy[at];
        }
        mul_into(norm, x[at], rrms[q]);
        mul_into(dnorm, dnorm, norm);
        add_into(dnorm_norm_total[q], dnorm_norm_total[q], dnorm);
      }
    }
    for (int q = 0; q < n; ++q) sum_dnorm_norm[block.row(q)] = dnorm_norm_total[q];
  });
}

template <typename T>
void rms_norm_backward_apply(const Tensor<T>& dy, const Tensor<T>& x, const Tensor<T>* weight,
                             const RmsNormSaved<T>& saved, const Tensor<T>& sum_dnorm_norm,
                             std::int64_t count, const RmsNormParams& params, std::int64_t valid,
                             Tensor<T>& dx, Tensor<T>* dweight) {
  SHARDSIM_ASSERT(&dx != &x && &dx != &dy, "rms_norm_backward_apply: dx must not be an input");
  const AxisView view = AxisView::of(x.shape(), params.axis);
  detail::require_valid_positions(view, valid);
  const T row_length = T(count);
  prepare_output(dx, x.shape());  // every element is written below
  // The blocks go in row order and their rows one after the other: dweight accumulates in row
  // order.
  detail::for_each_row(view, [&](const auto& block) {
    constexpr int n = detail::rows_in<decltype(block)>;
    for (int q = 0; q < n; ++q) {
      const T rrms = saved.rrms[block.row(q)];  // a local copy: stores into dx cannot alias it
      const T dnorm_norm_mean = sum_dnorm_norm[block.row(q)] / row_length;
      T norm = T(0), dnorm = T(0), product = T(0);  // in place: no Mp temporary per element
      for (std::int64_t i = 0; i < valid; ++i) {
        const std::int64_t at = block.at(q, i);
        mul_into(norm, x[at], rrms);
        if (weight) {
          mul_into(dnorm, dy[at], (*weight)[i]);
        } else {
          dnorm = dy[at];
        }
        if (dweight) {
          mul_into(product, dy[at], norm);
          add_into((*dweight)[i], (*dweight)[i], product);
        }
        // term 1: dnorm; term 2: - norm * mean(dnorm * norm) (through the statistic).
        // dx = (dnorm - norm * mean(dnorm * norm)) * rrms
        mul_into(product, norm, dnorm_norm_mean);
        sub_into(dnorm, dnorm, product);
        mul_into(dx[at], dnorm, rrms);
      }
      for (std::int64_t i = valid; i < view.extent; ++i) dx[block.at(q, i)] = T(0);
    }
  });
}

template <typename T>
void rms_norm_backward(const Tensor<T>& dy, const Tensor<T>& x, const Tensor<T>* weight,
                       const RmsNormSaved<T>& saved, const RmsNormParams& params, Tensor<T>& dx,
                       Tensor<T>* dweight) {
  const std::int64_t extent = x.shape().extent(params.axis);
  Tensor<T> sum_dnorm_norm;  // (rows)
  rms_norm_backward_sum(dy, x, weight, saved, params, extent, sum_dnorm_norm);
  rms_norm_backward_apply(dy, x, weight, saved, sum_dnorm_norm, extent, params, extent, dx,
                          dweight);
}

}  // namespace shardsim

// Explicit instantiation list: the op's .cpp instantiates float and double, and CMakeLists.txt
// finds this macro and generates the Mp, NarrowFloat, Dd and Qd units.
#define SHARDSIM_INSTANTIATE_RMS_NORM(T)                                                          \
  template void rms_norm_forward(const Tensor<T>&, const Tensor<T>*, const RmsNormParams&,        \
                                 Tensor<T>&, RmsNormSaved<T>&);                                   \
  template void rms_norm_backward(const Tensor<T>&, const Tensor<T>&, const Tensor<T>*,           \
                                  const RmsNormSaved<T>&, const RmsNormParams&, Tensor<T>&,       \
                                  Tensor<T>*);                                                    \
  template void rms_norm_partial_sum_sq(const Tensor<T>&, const RmsNormParams&, std::int64_t,     \
                                        Tensor<T>&);                                              \
  template void rms_norm_apply(const Tensor<T>&, const Tensor<T>*, const RmsNormSaved<T>&,        \
                               const RmsNormParams&, std::int64_t, Tensor<T>&);                   \
  template void rms_norm_backward_sum(const Tensor<T>&, const Tensor<T>&, const Tensor<T>*,       \
                                      const RmsNormSaved<T>&, const RmsNormParams&, std::int64_t, \
                                      Tensor<T>&);                                                \
  template void rms_norm_backward_apply(                                                          \
      const Tensor<T>&, const Tensor<T>&, const Tensor<T>*, const RmsNormSaved<T>&,               \
      const Tensor<T>&, std::int64_t, const RmsNormParams&, std::int64_t, Tensor<T>&, Tensor<T>*);
