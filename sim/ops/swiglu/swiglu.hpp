// SwiGLU (Shazeer 2020), the gated unit of the Llama MLP, elementwise over two tensors of one
// shape:
//   y = silu(g) * u,  silu(g) = g / (1 + exp(-g))
// (PyTorch's CPU silu computes g / (1 + exp(-g)) too.) Backward (dy -> dg, du, written), with
// s = 1 / (1 + exp(-g)) the sigmoid:
//   dg = (dy * u) * (s * (1 + g * (1 - s))),   du = dy * silu(g)
// Elementwise, so any Shard or Replicate placement computes exactly the dense values.
#pragma once

#include "core/tensor.hpp"

namespace shardsim {

// g, u -> y, same shape. y may be neither g nor u.
template <typename T>
void swiglu_forward(const Tensor<T>& g, const Tensor<T>& u, Tensor<T>& y);

// dy, g, u -> dg, du (written, not accumulated). dy, g and u have one shape.
template <typename T>
void swiglu_backward(const Tensor<T>& dy, const Tensor<T>& g, const Tensor<T>& u, Tensor<T>& dg,
                     Tensor<T>& du);

}  // namespace shardsim
