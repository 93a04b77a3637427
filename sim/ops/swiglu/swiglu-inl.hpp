// Template bodies of ops/swiglu/swiglu.hpp.
#pragma once

#include <cmath>

#include "core/error.hpp"
#include "ops/swiglu/swiglu.hpp"

namespace shardsim {

namespace detail {

// g / (1 + exp(-g)), in T.
template <typename T>
T silu(const T& g) {
  using std::exp;
  return g / T(T(1) + T(exp(T(-g))));
}

}  // namespace detail

template <typename T>
void swiglu_forward(const Tensor<T>& g, const Tensor<T>& u, Tensor<T>& y) {
  SHARDSIM_ASSERT(g.shape() == u.shape(), "swiglu_forward: gate and up shapes differ");
  prepare_output(y, g.shape());  // every element is written below (tensor.hpp)
  for (std::int64_t e = 0; e < g.numel(); ++e) y[e] = detail::silu(g[e]) * u[e];
}

template <typename T>
void swiglu_backward(const Tensor<T>& dy, const Tensor<T>& g, const Tensor<T>& u, Tensor<T>& dg,
                     Tensor<T>& du) {
  using std::exp;
  SHARDSIM_ASSERT(dy.shape() == g.shape() && g.shape() == u.shape(),
                  "swiglu_backward: dy, gate and up shapes differ");
  dg = Tensor<T>(g.shape());
  du = Tensor<T>(g.shape());
  const T one(1);
  for (std::int64_t e = 0; e < g.numel(); ++e) {
    const T v = g[e];
    const T s = one / T(one + T(exp(T(-v))));
    const T slope = s * T(one + T(v * T(one - s)));
    dg[e] = T(dy[e] * u[e]) * slope;
    du[e] = dy[e] * detail::silu(v);
  }
}

}  // namespace shardsim

// Explicit instantiation list: the op's .cpp instantiates float and double, and CMakeLists.txt
// finds this macro and generates the Mp, NarrowFloat, Dd and Qd units.
#define SHARDSIM_INSTANTIATE_SWIGLU(T)                                                            \
  template void swiglu_forward(const Tensor<T>&, const Tensor<T>&, Tensor<T>&);                   \
  template void swiglu_backward(const Tensor<T>&, const Tensor<T>&, const Tensor<T>&, Tensor<T>&, \
                                Tensor<T>&);
