// Plain SGD: param <- param - lr * grad, elementwise. lr arrives as a double; f32 runs use
// float(lr), f64 and mp use the double exactly.
#pragma once

#include "core/tensor.hpp"

namespace shardsim {

// REQUIRES: param and grad have the same shape.
template <typename T>
void sgd_update(Tensor<T>& param, const Tensor<T>& grad, double learning_rate) {
  SHARDSIM_ASSERT(param.shape() == grad.shape(), "sgd: grad shape differs from the parameter's");
  const T lr = T(learning_rate);
  for (std::int64_t i = 0; i < param.numel(); ++i) param[i] = param[i] - lr * grad[i];
}

}  // namespace shardsim
