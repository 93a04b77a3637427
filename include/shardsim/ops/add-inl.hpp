// Template bodies of ops/add.hpp.
#pragma once

#include "shardsim/ops/add.hpp"

namespace shardsim {

template <typename T>
void add_forward(const Tensor<T>& a, const Tensor<T>& b, Tensor<T>& y) {
  SHARDSIM_ASSERT(a.shape() == b.shape(), "add: the two inputs have different shapes");
  y = Tensor<T>(a.shape());
  for (std::int64_t e = 0; e < a.numel(); ++e) y[e] = a[e] + b[e];
}

}  // namespace shardsim

// Explicit instantiation list, used by add.cpp (float, double) and add_mp.cpp (Mp).
#define SHARDSIM_INSTANTIATE_ADD(T) \
  template void add_forward(const Tensor<T>&, const Tensor<T>&, Tensor<T>&);
