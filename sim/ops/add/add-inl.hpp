// Template bodies of ops/add.hpp.
#pragma once

#include "ops/add/add.hpp"

namespace shardsim {

template <typename T>
void add_forward(const Tensor<T>& a, const Tensor<T>& b, Tensor<T>& y) {
  SHARDSIM_ASSERT(a.shape() == b.shape(), "add: the two inputs have different shapes");
  y = Tensor<T>(a.shape());
  for (std::int64_t e = 0; e < a.numel(); ++e) y[e] = a[e] + b[e];
}

}  // namespace shardsim

// Explicit instantiation list: the op's .cpp instantiates float and double, and CMakeLists.txt
// finds this macro and generates the Mp, NarrowFloat, Dd and Qd units.
#define SHARDSIM_INSTANTIATE_ADD(T) \
  template void add_forward(const Tensor<T>&, const Tensor<T>&, Tensor<T>&);
