// Template bodies of ops/linear.hpp.
#pragma once

#include "core/parallel.hpp"
#include "core/scalar.hpp"
#include "ops/dot_sum.hpp"
#include "ops/linear/linear.hpp"

namespace shardsim {

namespace detail {

// Strides of the weight's two named axes: W[k, i] is at k * out + i * in.
struct WeightStrides {
  std::int64_t out = 0;
  std::int64_t in = 0;

  static WeightStrides of(const Shape& weight, const LinearParams& params) {
    return {AxisView::of(weight, params.out_axis).inner,
            AxisView::of(weight, params.in_axis).inner};
  }
};

}  // namespace detail

template <typename T>
void linear_forward(const Tensor<T>& x, const Tensor<T>& weight, const Tensor<T>* bias,
                    const LinearParams& params, Tensor<T>& y) {
  const std::int64_t out_features = weight.shape().extent(params.out_axis);
  SHARDSIM_ASSERT(weight.shape().rank() == 2 &&
                      weight.shape().extent(params.in_axis) == x.shape().extent(params.in_axis),
                  "linear: weight (out, in) must match the input's in-axis");
  y = Tensor<T>(linear_output_shape(x.shape(), params.in_axis, params.out_axis, out_features));
  const AxisView xv = AxisView::of(x.shape(), params.in_axis);   // (rows outer, in, rows inner)
  const AxisView yv = AxisView::of(y.shape(), params.out_axis);  // (rows outer, out, rows inner)
  const detail::WeightStrides w = detail::WeightStrides::of(weight.shape(), params);
  if constexpr (kIsExpansion<T>) {  // dd/qd: products and bias summed exactly, rounded once
    detail::exact_products<T>(
        xv.outer * xv.inner, out_features, xv.extent,
        [&](std::int64_t row, std::int64_t i) -> const T& {
          return x[xv.flat(row / xv.inner, i, row % xv.inner)];
        },
        [&](std::int64_t k, std::int64_t i) -> const T& { return weight[k * w.out + i * w.in]; },
        [&](std::int64_t row, std::int64_t k, detail::DotSum<T>& sum) {
          if (bias) sum.add_value((*bias)[k]);
          y[yv.flat(row / xv.inner, k, row % xv.inner)] = sum.value();
        });
    return;
  }
  // Rows (o, j) concurrently (parallel.hpp): each writes only its own output row.
  parallel_for(xv.outer * xv.inner, [&](std::int64_t row) {
    const std::int64_t o = row / xv.inner;
    const std::int64_t j = row % xv.inner;
    // In place (scalar.hpp): an Mp row allocates its two scratch values once, not per element.
    // dd/qd: the exact sum of the products and the bias, rounded once (dot_sum.hpp).
    detail::DotSum<T> sum;
    for (std::int64_t k = 0; k < out_features; ++k) {
      sum.clear();
      for (std::int64_t i = 0; i < xv.extent; ++i) {
        sum.add(x[xv.flat(o, i, j)], weight[k * w.out + i * w.in]);
      }
      if (bias) sum.add_value((*bias)[k]);
      y[yv.flat(o, k, j)] = sum.value();
    }
  });
}

template <typename T>
void linear_backward(const Tensor<T>& dy, const Tensor<T>& x, const Tensor<T>& weight,
                     const LinearParams& params, Tensor<T>& dx, Tensor<T>* dweight,
                     Tensor<T>* dbias) {
  const AxisView xv = AxisView::of(x.shape(), params.in_axis);
  const AxisView yv = AxisView::of(dy.shape(), params.out_axis);
  SHARDSIM_ASSERT(xv.outer == yv.outer && xv.inner == yv.inner,
                  "linear_backward: dy and x have different rows");
  const detail::WeightStrides w = detail::WeightStrides::of(weight.shape(), params);
  dx = Tensor<T>(x.shape());
  const std::int64_t rows = xv.outer * xv.inner;
  // dx: the transposed contraction, over output features; rows concurrently, each writing its
  // own row of dx.
  if constexpr (kIsExpansion<T>) {  // dd/qd: exact dots rounded once
    detail::exact_products<T>(
        rows, xv.extent, yv.extent,
        [&](std::int64_t row, std::int64_t k) -> const T& {
          return dy[yv.flat(row / xv.inner, k, row % xv.inner)];
        },
        [&](std::int64_t i, std::int64_t k) -> const T& { return weight[k * w.out + i * w.in]; },
        [&](std::int64_t row, std::int64_t i, detail::DotSum<T>& sum) {
          dx[xv.flat(row / xv.inner, i, row % xv.inner)] = sum.value();
        });
  } else {
    parallel_for(rows, [&](std::int64_t row) {
      const std::int64_t o = row / xv.inner;
      const std::int64_t j = row % xv.inner;
      detail::DotSum<T> sum;
      for (std::int64_t i = 0; i < xv.extent; ++i) {
        sum.clear();
        for (std::int64_t k = 0; k < yv.extent; ++k) {
          sum.add(dy[yv.flat(o, k, j)], weight[k * w.out + i * w.in]);
        }
        dx[xv.flat(o, i, j)] = sum.value();
      }
    });
  }
  if (!dweight && !dbias) return;
  // dW and db: every row's outer product, accumulated row by row in ascending row order. Output
  // features run concurrently: feature k owns db[k] and row k of dW, and adds the rows' terms
  // in the same order whatever the thread count.
  parallel_for(yv.extent, [&](std::int64_t k) {
    T product = T(0);
    for (std::int64_t row = 0; row < rows; ++row) {
      const std::int64_t o = row / xv.inner;
      const std::int64_t j = row % xv.inner;
      const T g = dy[yv.flat(o, k, j)];  // a copy: stores into dW cannot alias it
      if (dbias) add_into((*dbias)[k], (*dbias)[k], g);
      if (!dweight) continue;
      for (std::int64_t i = 0; i < xv.extent; ++i) {
        T& dw = (*dweight)[k * w.out + i * w.in];
        mul_into(product, g, x[xv.flat(o, i, j)]);
        add_into(dw, dw, product);
      }
    }
  });
}

}  // namespace shardsim

// Explicit instantiation list: the op's .cpp instantiates float and double, and CMakeLists.txt
// finds this macro and generates the Mp, NarrowFloat, Dd and Qd units.
#define SHARDSIM_INSTANTIATE_LINEAR(T)                                                \
  template void linear_forward(const Tensor<T>&, const Tensor<T>&, const Tensor<T>*,  \
                               const LinearParams&, Tensor<T>&);                      \
  template void linear_backward(const Tensor<T>&, const Tensor<T>&, const Tensor<T>&, \
                                const LinearParams&, Tensor<T>&, Tensor<T>*, Tensor<T>*);
