// Linear layer, per-rank kernel and dense oracle: y = x W^T (+ b).
//
// Convention (PyTorch's nn.Linear): the weight is (out, in), named by axes, e.g. [ffn, hidden]
// for an up projection hidden -> ffn and [hidden, ffn] for the down projection. The input has
// the `in` axis somewhere among its axes; the output is the input's shape with that axis replaced,
// in the same position, by the `out` axis:
//   x (..., in, ...)  W (out, in)  b (out)  ->  y (..., out, ...)
//   y[row, k] = (sum_{i ascending} x[row, i] * W[k, i]) + b[k]        the sum starts at T(0)
// where a row is one position of the other axes. The kernel also serves as the dense oracle on
// global tensors: same arithmetic, same order, which is why a column-parallel plan (each rank
// owns whole output features and sees every input feature) matches it bit for bit.
#pragma once

#include <string>
#include <vector>

#include "core/tensor.hpp"

namespace shardsim {

struct LinearParams {
  std::string in_axis = "hidden";  // contracted: an axis of x and the weight's second axis
  std::string out_axis = "ffn";    // produced: the weight's first axis, not an axis of x
};

// x's shape with `in_axis` replaced in place by (out_axis, out_features).
// REQUIRES: x has in_axis and not out_axis.
inline Shape linear_output_shape(const Shape& x, const std::string& in_axis,
                                 const std::string& out_axis, std::int64_t out_features) {
  std::vector<Axis> axes = x.axes();
  axes[x.position(in_axis)] = {out_axis, out_features};
  return Shape(std::move(axes));
}

// A linear layer keeps its input for backward (dW = dy^T x); the input is the caller's tensor,
// so there is no separate Saved struct.

// x: (..., in, ...)  weight: (out, in)  bias: (out) or null  ->  y: (..., out, ...)
template <typename T>
void linear_forward(const Tensor<T>& x, const Tensor<T>& weight, const Tensor<T>* bias,
                    const LinearParams& params, Tensor<T>& y);

// Backward. Activation grads are written, parameter grads accumulate:
//   dx[row, i]  = sum_{k ascending} dy[row, k] * W[k, i]      (=, the sum starts at T(0))
//   dW[k, i]   += dy[row, k] * x[row, i]                       (+=, rows in row-major order)
//   db[k]      += dy[row, k]                                   (+=, rows in row-major order)
// dy: (..., out, ...) like y. dweight/dbias may be null.
template <typename T>
void linear_backward(const Tensor<T>& dy, const Tensor<T>& x, const Tensor<T>& weight,
                     const LinearParams& params, Tensor<T>& dx, Tensor<T>* dweight,
                     Tensor<T>* dbias);

}  // namespace shardsim
