// Template bodies of ops/dropout.hpp.
#pragma once

#include "ops/dropout/dropout.hpp"

namespace shardsim {

template <typename T>
void dropout_forward(const Tensor<T>& x, const DropoutMask& mask, double p, Tensor<T>& y) {
  SHARDSIM_ASSERT(static_cast<std::int64_t>(mask.keep.size()) == x.numel(),
                  "dropout: mask size differs from the input's");
  const T scale = dropout_scale<T>(p);
  y = Tensor<T>(x.shape());
  for (std::int64_t e = 0; e < x.numel(); ++e) {
    y[e] = mask.keep[static_cast<std::size_t>(e)] ? T(x[e] * scale) : T(0);
  }
}

template <typename T>
void dropout_backward(const Tensor<T>& dy, const DropoutMask& mask, double p, Tensor<T>& dx) {
  SHARDSIM_ASSERT(static_cast<std::int64_t>(mask.keep.size()) == dy.numel(),
                  "dropout_backward: mask size differs from dy's");
  const T scale = dropout_scale<T>(p);
  dx = Tensor<T>(dy.shape());
  for (std::int64_t e = 0; e < dy.numel(); ++e) {
    dx[e] = mask.keep[static_cast<std::size_t>(e)] ? T(dy[e] * scale) : T(0);
  }
}

template <typename T>
Tensor<T> mask_values(const Shape& shape, const DropoutMask& mask) {
  Tensor<T> out(shape);
  for (std::int64_t e = 0; e < out.numel(); ++e) {
    out[e] = mask.keep[static_cast<std::size_t>(e)] ? T(1) : T(0);
  }
  return out;
}

}  // namespace shardsim

// Explicit instantiation list: the op's .cpp instantiates float and double, and CMakeLists.txt
// finds this macro and generates the Mp, NarrowFloat, Dd and Qd units.
#define SHARDSIM_INSTANTIATE_DROPOUT(T)                                                     \
  template void dropout_forward(const Tensor<T>&, const DropoutMask&, double, Tensor<T>&);  \
  template void dropout_backward(const Tensor<T>&, const DropoutMask&, double, Tensor<T>&); \
  template Tensor<T> mask_values(const Shape&, const DropoutMask&);
