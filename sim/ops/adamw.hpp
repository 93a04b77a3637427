// AdamW, as torch.optim.AdamW (torch 1.13, _single_tensor_adamw, amsgrad off), elementwise on one
// parameter with its two moment tensors. At update t (1, 2, ...):
//   p  <- p * (1 - lr * weight_decay)                 decoupled weight decay, first
//   m  <- m * beta1 + (1 - beta1) * g                 exp_avg
//   v  <- v * beta2 + (1 - beta2) * g * g             exp_avg_sq
//   p  <- p - (lr / bc1) * (m / (sqrt(v) / sqrt(bc2) + eps))
// with bc1 = 1 - beta1^t and bc2 = 1 - beta2^t. The scalars (1 - lr * wd, 1 - beta, lr / bc1,
// sqrt(bc2)) are Python floats in PyTorch: here they are computed in double for float, bf16/f16
// (NarrowFloat) and double runs, and then rounded once to the run's scalar as PyTorch rounds a
// Python float into a float tensor op; dd, qd and mp runs compute them in their own precision from
// the same double hyperparameters. Every element operation is the run's own arithmetic, in the
// order written above, so the oracle and every rank compute the same bits from the same inputs.
//
// The faults change the ranks' update only (adamw_step's `fault`):
//   bias_correction_missing  bc1 = bc2 = 1: the raw moments, a first step 1 / (1 - beta1) = 10x
//                            too large at beta1 = 0.9 (before the sqrt(v) normalization evens it)
//   decay_coupled            Adam with L2: g <- g + weight_decay * p enters the moments, and
//                            the parameter is not decayed by lr * weight_decay
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/tensor.hpp"

namespace shardsim {

struct AdamWHyper {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

enum class AdamWFault { none, bias_correction_missing, decay_coupled };

namespace detail {

// The type AdamW's scalars are computed in: double for the runs whose scalar is at most a double
// wide (float, NarrowFloat, double), the run's own type for dd, qd and mp.
template <typename T>
using AdamWScalar = std::conditional_t<(sizeof(T) <= sizeof(double)), double, T>;

// beta^t: std::pow in double (Python's float power), repeated products in the wider types.
template <typename S>
S adamw_power(double beta, std::int64_t t) {
  if constexpr (std::is_same_v<S, double>) {
    return std::pow(beta, static_cast<double>(t));
  } else {
    S out(1.0);
    for (std::int64_t k = 0; k < t; ++k) out = out * S(beta);
    return out;
  }
}

}  // namespace detail

// One AdamW update of `param` at update count `t` (>= 1) with gradient `grad`; `exp_avg` and
// `exp_avg_sq` hold the moments (zeros before the first update).
// REQUIRES: the four tensors have one shape; t >= 1.
template <typename T>
void adamw_step(Tensor<T>& param, const Tensor<T>& grad, Tensor<T>& exp_avg, Tensor<T>& exp_avg_sq,
                const AdamWHyper& h, std::int64_t t, AdamWFault fault = AdamWFault::none) {
  SHARDSIM_ASSERT(param.shape() == grad.shape() && param.shape() == exp_avg.shape() &&
                      param.shape() == exp_avg_sq.shape(),
                  "adamw: the gradient and moments have the parameter's shape");
  SHARDSIM_ASSERT(t >= 1, "adamw: updates count from 1");
  using S = detail::AdamWScalar<T>;
  using std::sqrt;
  const bool corrected = fault != AdamWFault::bias_correction_missing;
  const bool coupled = fault == AdamWFault::decay_coupled;
  const S one(1.0);
  const S bc1 = corrected ? one - detail::adamw_power<S>(h.beta1, t) : one;
  const S bc2 = corrected ? one - detail::adamw_power<S>(h.beta2, t) : one;
  const T decay = T(coupled ? one : one - S(h.lr) * S(h.weight_decay));
  const T l2 = T(coupled ? S(h.weight_decay) : S(0.0));
  const T beta1 = T(h.beta1);
  const T beta2 = T(h.beta2);
  const T keep1 = T(one - S(h.beta1));
  const T keep2 = T(one - S(h.beta2));
  const T step_size = T(S(h.lr) / bc1);
  const T bc2_sqrt = T(sqrt(bc2));
  const T eps = T(h.eps);
  for (std::int64_t i = 0; i < param.numel(); ++i) {
    const T g = coupled ? grad[i] + l2 * param[i] : grad[i];
    const T p = param[i] * decay;
    exp_avg[i] = exp_avg[i] * beta1 + keep1 * g;  // add_(g, alpha): alpha * g
    exp_avg_sq[i] = exp_avg_sq[i] * beta2 + keep2 * g * g;  // addcmul: value * t1 * t2
    const T denom = sqrt(exp_avg_sq[i]) / bc2_sqrt + eps;
    param[i] = p - step_size * (exp_avg[i] / denom);
  }
}

}  // namespace shardsim
