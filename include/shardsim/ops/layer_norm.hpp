// LayerNorm over one named axis (Ba, Kiros, Hinton 2016), per-rank kernel and dense oracle.
//
// For each row r (every position of the other axes), with H = extent of `axis`:
//   mean_r = (sum_i x_ri) / H                    sum in ascending i
//   var_r  = (sum_i (x_ri - mean_r)^2) / H       biased (two-pass), eps inside the sqrt
//   rstd_r = 1 / sqrt(var_r + eps)
//   y_ri   = ((x_ri - mean_r) * rstd_r) * w_i + b_i
// The kernel sees one rank's rows; a rank that owns whole rows has everything it needs. It is
// also the dense oracle, applied to the global tensor: same arithmetic, same order, which is why
// the sequence-sharded plan must match it bitwise.
#pragma once

#include <string>

#include "shardsim/tensor.hpp"

namespace shardsim {

struct LayerNormParams {
  std::string axis = "hidden";
  double eps = 1e-5;  // f32 runs use float(eps); f64 and mp use this double exactly
};

// What forward keeps for backward. Both have shape x.shape().without(axis).
template <typename T>
struct LayerNormSaved {
  Tensor<T> mean;
  Tensor<T> rstd;
};

// x: (..., H, ...) -> y same shape. weight/bias: (H) or null.
template <typename T>
void layer_norm_forward(const Tensor<T>& x, const Tensor<T>* weight, const Tensor<T>* bias,
                        const LayerNormParams& params, Tensor<T>& y, LayerNormSaved<T>& saved);

// Activation grads are written (dx = ...); parameter grads accumulate (dweight += ...,
// dbias += ...), so one buffer can collect several contributions. dweight/dbias may be null.
template <typename T>
void layer_norm_backward(const Tensor<T>& dy, const Tensor<T>& x, const Tensor<T>* weight,
                         const LayerNormSaved<T>& saved, const LayerNormParams& params,
                         Tensor<T>& dx, Tensor<T>* dweight, Tensor<T>* dbias);

}  // namespace shardsim
