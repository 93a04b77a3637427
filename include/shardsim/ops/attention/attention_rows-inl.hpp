// Per-row gradient helpers of the attention kernels, included by attention-inl.hpp after the
// HeadStrides it uses (not a standalone header).
#pragma once

#include <cstdint>
#include <vector>

#include "shardsim/ops/attention/attention.hpp"
#include "shardsim/ops/dot_sum.hpp"
#include "shardsim/scalar.hpp"

namespace shardsim::detail {

// The gradients of query row (b, h, i) given p_n = probs[n] and ds_n = dscores[n] over its
// allowed keys (key n is keys[n]):
//   dq_i = (sum_n ds_n k_n) * scale     (n ascending; written, or added when accumulate_dq)
//   dk_n += (ds_n q_i) * scale,  dv_n += p_n dout_i
// Writing dq (not adding it to a zero) keeps the sign of a zero result.
template <typename T>
void row_gradients(const Tensor<T>& dout, const Tensor<T>& q, const HeadStrides& q_layout,
                   const Tensor<T>& k, const HeadStrides& k_layout, std::int64_t b, std::int64_t h,
                   std::int64_t i, const std::vector<std::int64_t>& keys,
                   const std::vector<T>& probs, const std::vector<T>& dscores, const T& scale,
                   bool accumulate_dq, Tensor<T>& dq, Tensor<T>& dk, Tensor<T>& dv) {
  DotSum<T> sum;  // dd/qd: exact, rounded once (dot_sum.hpp)
  T product = T(0);
  for (std::int64_t d = 0; d < q_layout.dim; ++d) {
    sum.clear();
    for (std::size_t n = 0; n < keys.size(); ++n) {
      sum.add(dscores[n], k[k_layout.at(b, keys[n], h, d)]);
    }
    T& dq_d = dq[q_layout.at(b, i, h, d)];
    if (accumulate_dq) {
      mul_into(product, sum.value(), scale);
      add_into(dq_d, dq_d, product);
    } else {
      mul_into(dq_d, sum.value(), scale);
    }
  }
  for (std::size_t n = 0; n < keys.size(); ++n) {
    for (std::int64_t d = 0; d < q_layout.dim; ++d) {
      const std::int64_t at = k_layout.at(b, keys[n], h, d);
      mul_into(product, dscores[n], q[q_layout.at(b, i, h, d)]);
      mul_into(product, product, scale);
      add_into(dk[at], dk[at], product);
      mul_into(product, probs[n], dout[q_layout.at(b, i, h, d)]);
      add_into(dv[at], dv[at], product);
    }
  }
}

// dp_n = dout_i . v_n for every allowed key n of query row (b, h, i) (key n is keys[n]), into
// dp[n]: each one accumulator over d ascending.
template <typename T>
void row_value_gradients(const Tensor<T>& dout, const HeadStrides& q_layout, const Tensor<T>& v,
                         const HeadStrides& k_layout, std::int64_t b, std::int64_t h,
                         std::int64_t i, const std::vector<std::int64_t>& keys,
                         std::vector<T>& dp) {
  dp.resize(keys.size(), T(0));  // every entry is written below
  DotSum<T> sum;                 // dd/qd: exact, rounded once (dot_sum.hpp)
  for (std::size_t n = 0; n < keys.size(); ++n) {
    sum.clear();
    for (std::int64_t d = 0; d < q_layout.dim; ++d) {
      sum.add(dout[q_layout.at(b, i, h, d)], v[k_layout.at(b, keys[n], h, d)]);
    }
    dp[n] = sum.value();
  }
}

}  // namespace shardsim::detail
