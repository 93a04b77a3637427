// Template bodies of ops/gelu.hpp.
#pragma once

#include <cmath>
#include <numbers>
#include <type_traits>

#include "ops/gelu/gelu.hpp"

namespace shardsim {

namespace detail {

// The constants of gelu.hpp, each computed once in T.
template <typename T>
struct GeluConstants {
  T half = T(0.5);
  T one = T(1);
  T pi;
  T rsqrt2;        // sqrt(0.5)
  T inv_sqrt_2pi;  // 1 / sqrt(2 pi)
  T k;             // sqrt(2 / pi)
  T c;             // 0.044715

  GeluConstants() {
    using std::acos;
    using std::sqrt;
    if constexpr (std::is_floating_point_v<T>) {
      pi = std::numbers::pi_v<T>;
    } else {
      pi = T(acos(T(-1)));  // MPFR's acos is correctly rounded
    }
    rsqrt2 = T(sqrt(T(0.5)));
    inv_sqrt_2pi = T(one / T(sqrt(T(T(2) * pi))));
    k = T(sqrt(T(T(2) / pi)));
    c = T(T(44715) / T(1000000));
  }
};

}  // namespace detail

template <typename T>
void gelu_forward(const Tensor<T>& x, const GeluParams& params, Tensor<T>& y) {
  using std::erf;
  using std::tanh;
  const detail::GeluConstants<T> g;
  prepare_output(y, x.shape());  // every element is written below (tensor.hpp)
  for (std::int64_t e = 0; e < x.numel(); ++e) {
    const T v = x[e];  // a copy: y[e] may be x[e]
    T inner;
    if (params.approximate == GeluApprox::tanh) {
      const T cube = T(v * v) * v;
      inner = T(tanh(T(g.k * T(v + T(g.c * cube)))));
    } else {
      inner = T(erf(T(v * g.rsqrt2)));
    }
    y[e] = T(v * g.half) * T(g.one + inner);
  }
}

template <typename T>
void gelu_backward(const Tensor<T>& dy, const Tensor<T>& x, const GeluParams& params,
                   Tensor<T>& dx) {
  using std::erf;
  using std::exp;
  using std::tanh;
  SHARDSIM_ASSERT(dy.shape() == x.shape(), "gelu_backward: dy and x shapes differ");
  const detail::GeluConstants<T> g;
  dx = Tensor<T>(x.shape());
  for (std::int64_t e = 0; e < x.numel(); ++e) {
    const T v = x[e];
    T slope;
    if (params.approximate == GeluApprox::tanh) {
      const T square = v * v;
      const T cube = square * v;
      const T t = tanh(T(g.k * T(v + T(g.c * cube))));
      // term 1: d(x * 0.5)/dx * (1 + t); term 2: (x * 0.5) * dt/dx.
      const T term1 = g.half * T(g.one + t);
      const T dinner = T(g.k * T(g.one + T(T(T(3) * g.c) * square)));
      const T term2 = T(v * g.half) * T(T(g.one - T(t * t)) * dinner);
      slope = term1 + term2;
    } else {
      // term 1: the normal cdf; term 2: x times the normal pdf.
      const T cdf = g.half * T(g.one + T(erf(T(v * g.rsqrt2))));
      const T pdf = T(exp(T(T(-g.half * v) * v))) * g.inv_sqrt_2pi;
      slope = cdf + T(v * pdf);
    }
    dx[e] = dy[e] * slope;
  }
}

}  // namespace shardsim

// Explicit instantiation list: the op's .cpp instantiates float and double, and CMakeLists.txt
// finds this macro and generates the Mp, NarrowFloat, Dd and Qd units.
#define SHARDSIM_INSTANTIATE_GELU(T)                                           \
  template void gelu_forward(const Tensor<T>&, const GeluParams&, Tensor<T>&); \
  template void gelu_backward(const Tensor<T>&, const Tensor<T>&, const GeluParams&, Tensor<T>&);
