// Residual add, elementwise: y = a + b (one rounding per element). Backward: da = db = dy.
// Elementwise, so any sharded placement computes exactly the dense values (Partial addends are
// the exception: a sum of addend sums is a reordered sum).
#pragma once

#include "core/tensor.hpp"

namespace shardsim {

// a, b, y: the same shape. Saves nothing for backward.
template <typename T>
void add_forward(const Tensor<T>& a, const Tensor<T>& b, Tensor<T>& y);

}  // namespace shardsim
