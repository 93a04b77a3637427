// GELU (Hendrycks & Gimpel 2016), elementwise, in the two named forms PyTorch offers
// (torch.nn.functional.gelu, `approximate`):
//   none (erf):  y = (x * 0.5) * (1 + erf(x * r))                  r = sqrt(T(0.5))
//   tanh:        y = (x * 0.5) * (1 + tanh(k * (x + c * x^3)))     k = sqrt(T(2) / pi_T),
//                                                                  c = T(44715) / T(1000000)
// Every constant is computed in the run's type T: pi_T is T's correctly rounded pi, sqrt and the
// division round once, so 0.044715 is the correctly rounded T value of the decimal (at mp too).
// x^3 is (x * x) * x. Backward (dy -> dx, written):
//   none:  dx = dy * (cdf + x * pdf),  cdf = 0.5 * (1 + erf(x * r)),
//                                      pdf = exp(-0.5 * x * x) * s,  s = 1 / sqrt(T(2) * pi_T)
//   tanh:  u = k * (x + c * x^3), t = tanh(u);
//          dx = dy * (0.5 * (1 + t) + (x * 0.5) * ((1 - t * t) * k * (1 + 3 * c * x^2)))
// Elementwise, so any sharded placement computes exactly the dense values.
#pragma once

#include <string_view>

#include "core/tensor.hpp"

namespace shardsim {

enum class GeluApprox { none, tanh };
std::string_view gelu_approx_name(GeluApprox approx);  // "none", "tanh"

struct GeluParams {
  GeluApprox approximate = GeluApprox::none;
};

// GELU keeps its input for backward (the caller's tensor); there is no separate Saved struct.

// x -> y, same shape. y may be x (in place: each element is read before it is overwritten).
template <typename T>
void gelu_forward(const Tensor<T>& x, const GeluParams& params, Tensor<T>& y);

// dy, x -> dx (written, not accumulated). dy has x's shape.
template <typename T>
void gelu_backward(const Tensor<T>& dy, const Tensor<T>& x, const GeluParams& params,
                   Tensor<T>& dx);

}  // namespace shardsim
