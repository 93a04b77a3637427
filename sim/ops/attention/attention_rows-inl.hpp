// Per-row gradient helpers of the attention kernels, included by attention-inl.hpp after the
// HeadStrides it uses (not a standalone header).
#pragma once

#include <cstdint>
#include <vector>

#include "ops/attention/attention.hpp"
#include "ops/dot_sum.hpp"
#include "core/scalar.hpp"

namespace shardsim::detail {

// At dd/qd: a (batch, head) pair's keys and values unpacked once for the exact dots of the
// backward (dot_sum.hpp): key_rows[j] = k_j, value_rows[j] = v_j, key_cols[d] = (k_jd over j).
// Empty at the other types.
template <typename T>
struct HeadOperands {
  DotOperands<T> key_rows, value_rows, key_cols;

  HeadOperands(const Tensor<T>& k, const Tensor<T>& v, const HeadStrides& layout, std::int64_t b,
               std::int64_t h) {
    const auto at = [&](std::int64_t j, std::int64_t d) { return layout.at(b, j, h, d); };
    key_rows.assign(layout.positions, layout.dim,
                    [&](std::int64_t j, std::int64_t d) -> const T& { return k[at(j, d)]; });
    value_rows.assign(layout.positions, layout.dim,
                      [&](std::int64_t j, std::int64_t d) -> const T& { return v[at(j, d)]; });
    key_cols.assign(layout.dim, layout.positions,
                    [&](std::int64_t d, std::int64_t j) -> const T& { return k[at(j, d)]; });
  }
};

// sum_n e_n v_nd for every d of query row (b, h, ...) over its allowed keys (key n is keys[n],
// e_n = weights[n]), into sums[d]. f32/f64/mp: every d one accumulator over the keys ascending,
// all d together so v is read along its rows. dd/qd: an exact dot per d, from the unpacked
// columns value_cols[d] = (v_jd over j) when the keys are one range.
template <typename T>
void row_weighted_sum(const Tensor<T>& v, const HeadStrides& k_layout, std::int64_t b,
                      std::int64_t h, const std::vector<std::int64_t>& keys,
                      const std::vector<T>& weights, const DotOperands<T>& value_cols,
                      std::vector<T>& sums) {
  sums.resize(static_cast<std::size_t>(k_layout.dim), T(0));
  if constexpr (kIsExpansion<T>) {  // dd/qd: each d an exact dot rounded once
    DotSum<T> dot;
    DotOperand<T> weight_row;
    const bool in_range = contiguous(keys);  // keys[0], keys[0] + 1, ...
    if (in_range) {
      weight_row.assign(static_cast<std::int64_t>(keys.size()),
                        [&](std::int64_t n) -> const T& { return weights[n]; });
    }
    for (std::int64_t d = 0; d < k_layout.dim; ++d) {
      dot.clear();
      if (in_range) {
        dot.add(weight_row, 0, value_cols[d], keys.front(), static_cast<std::int64_t>(keys.size()));
      } else {
        for (std::size_t n = 0; n < keys.size(); ++n) {
          dot.add(weights[n], v[k_layout.at(b, keys[n], h, d)]);
        }
      }
      sums[static_cast<std::size_t>(d)] = dot.value();
    }
  } else {
    T product = T(0);
    for (T& sum_d : sums) sum_d = 0;
    for (std::size_t n = 0; n < keys.size(); ++n) {
      const T weight = weights[n];  // a copy: stores into sums cannot alias it
      const T* value = v.data() + k_layout.at(b, keys[n], h, 0);
      for (std::int64_t d = 0; d < k_layout.dim; ++d) {
        mul_into(product, weight, value[d * k_layout.dim_stride]);
        add_into(sums[d], sums[d], product);
      }
    }
  }
}

// The gradients of query row (b, h, i) given p_n = probs[n] and ds_n = dscores[n] over its
// allowed keys (key n is keys[n]):
//   dq_i = (sum_n ds_n k_n) * scale     (n ascending; written, or added when accumulate_dq)
//   dk_n += (ds_n q_i) * scale,  dv_n += p_n dout_i
// Writing dq (not adding it to a zero) keeps the sign of a zero result.
template <typename T>
void row_gradients(const Tensor<T>& dout, const Tensor<T>& q, const HeadStrides& q_layout,
                   const Tensor<T>& k, const HeadStrides& k_layout, std::int64_t b, std::int64_t h,
                   std::int64_t i, const HeadOperands<T>& kv, const std::vector<std::int64_t>& keys,
                   const std::vector<T>& probs, const std::vector<T>& dscores, const T& scale,
                   bool accumulate_dq, Tensor<T>& dq, Tensor<T>& dk, Tensor<T>& dv) {
  DotSum<T> sum;  // dd/qd: exact, rounded once (dot_sum.hpp)
  T product = T(0);
  DotOperand<T> ds_row;  // dd/qd, keys one range: ds_n unpacked once for every d
  const bool packed = kIsExpansion<T> && contiguous(keys);
  if constexpr (kIsExpansion<T>) {
    if (packed) {
      ds_row.assign(static_cast<std::int64_t>(keys.size()),
                    [&](std::int64_t n) -> const T& { return dscores[n]; });
    }
  }
  for (std::int64_t d = 0; d < q_layout.dim; ++d) {
    sum.clear();
    if constexpr (kIsExpansion<T>) {
      if (packed) {
        sum.add(ds_row, 0, kv.key_cols[d], keys.front(), static_cast<std::int64_t>(keys.size()));
      }
    }
    for (std::size_t n = 0; n < keys.size() && !packed; ++n) {
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
                         std::int64_t i, const HeadOperands<T>& kv,
                         const std::vector<std::int64_t>& keys, std::vector<T>& dp) {
  dp.resize(keys.size(), T(0));  // every entry is written below
  DotSum<T> sum;                 // dd/qd: exact, rounded once (dot_sum.hpp)
  if constexpr (kIsExpansion<T>) {
    DotOperand<T> dout_row;
    dout_row.assign(q_layout.dim,
                    [&](std::int64_t d) -> const T& { return dout[q_layout.at(b, i, h, d)]; });
    for (std::size_t n = 0; n < keys.size(); ++n) {
      sum.clear();
      sum.add(dout_row, kv.value_rows[keys[n]]);
      dp[n] = sum.value();
    }
    return;
  }
  for (std::size_t n = 0; n < keys.size(); ++n) {
    sum.clear();
    for (std::int64_t d = 0; d < q_layout.dim; ++d) {
      sum.add(dout[q_layout.at(b, i, h, d)], v[k_layout.at(b, keys[n], h, d)]);
    }
    dp[n] = sum.value();
  }
}

}  // namespace shardsim::detail
