// Template bodies of ops/attention/attention.hpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "ops/attention/attention.hpp"
#include "ops/dot_sum.hpp"
#include "core/parallel.hpp"
#include "core/scalar.hpp"

namespace shardsim {

namespace detail {

// Extents and row-major strides of a (batch, POS, head, head_dim) tensor, found by axis name.
struct HeadStrides {
  std::int64_t batch = 0, positions = 0, heads = 0, dim = 0;  // extents
  std::int64_t batch_stride = 0, pos_stride = 0, head_stride = 0, dim_stride = 0;

  HeadStrides(const Shape& shape, std::string_view pos_axis)
      : batch(shape.extent("batch")),
        positions(shape.extent(pos_axis)),
        heads(shape.extent("head")),
        dim(shape.extent("head_dim")),
        batch_stride(stride_of(shape, "batch")),
        pos_stride(stride_of(shape, pos_axis)),
        head_stride(stride_of(shape, "head")),
        dim_stride(stride_of(shape, "head_dim")) {}
  // The flat index of element (b, p, h, d).
  std::int64_t at(std::int64_t b, std::int64_t p, std::int64_t h, std::int64_t d) const {
    return b * batch_stride + p * pos_stride + h * head_stride + d * dim_stride;
  }
};

// Strides of a (batch, seq, head) row tensor (lse, max, sum).
struct RowStrides {
  std::int64_t batch_stride = 0, seq_stride = 0, head_stride = 0;
  explicit RowStrides(const Shape& shape)
      : batch_stride(stride_of(shape, "batch")),
        seq_stride(stride_of(shape, "seq")),
        head_stride(stride_of(shape, "head")) {}
  // The flat index of row (b, i, h).
  std::int64_t at(std::int64_t b, std::int64_t i, std::int64_t h) const {
    return b * batch_stride + i * seq_stride + h * head_stride;
  }
};

// At Mp every product and sum below is written in place (add_into etc., scalar.hpp) into values
// made once per row, not per element; each is the operator's one rounding, so the values are the
// textbook loop's bit for bit. For float and double the helpers are the operators on locals.

// The scores s_j = (q_i . k_j) * scale of query row (b, h, i) against its allowed keys. Writes
// `keys` (the allowed kv indices j, ascending) and `scores` (scores[n] is the score of key
// keys[n]). Each dot product is one accumulator over d ascending; four keys are computed side by
// side (independent accumulators, so the order of every sum is unchanged) to keep the FPU busy.
template <typename T>
void row_scores(const Tensor<T>& q, const HeadStrides& q_layout, const Tensor<T>& k,
                const HeadStrides& k_layout, std::int64_t b, std::int64_t h, std::int64_t i,
                std::int64_t q_position, const std::vector<std::int64_t>& k_pos,
                const AttentionParams& params, const T& scale, const DotOperands<T>& key_rows,
                std::vector<std::int64_t>& keys, std::vector<T>& scores) {
  keys.clear();
  for (std::int64_t j = 0; j < k_layout.positions; ++j) {
    if (attention_allowed(params, q_position, k_pos[static_cast<std::size_t>(j)]))
      keys.push_back(j);
  }
  scores.resize(keys.size(), T(0));                     // every entry is written below
  const T* query = q.data() + q_layout.at(b, i, h, 0);  // q_i, head_dim values at q_step
  const std::int64_t q_step = q_layout.dim_stride, k_step = k_layout.dim_stride;
  if constexpr (kIsExpansion<T>) {  // dd/qd: each q . k an exact dot rounded once (dot_sum.hpp)
    DotSum<T> dot;
    DotOperand<T> query_row;  // key_rows[j] is k_j
    query_row.assign(q_layout.dim, [&](std::int64_t d) -> const T& { return query[d * q_step]; });
    for (std::size_t n = 0; n < keys.size(); ++n) {
      dot.clear();
      dot.add(query_row, key_rows[keys[n]]);
      mul_into(scores[n], dot.value(), scale);
    }
    return;
  }
  T dot0 = T(0), dot1 = T(0), dot2 = T(0), dot3 = T(0), product = T(0);
  std::size_t n = 0;
  // Four keys side by side only for register-held scalars. At mp every operation is an MPFR call
  // on storage, so interleaving buys no parallelism and spreads each call's reads over four
  // keys' rows (kConcurrentRowBlock, norm_rows.hpp, is the same choice for LayerNorm).
  constexpr std::size_t kKeys = std::is_trivially_copyable_v<T> ? 4 : 1;
  for (; kKeys == 4 && n + 4 <= keys.size(); n += 4) {
    const T* key0 = k.data() + k_layout.at(b, keys[n], h, 0);
    const T* key1 = k.data() + k_layout.at(b, keys[n + 1], h, 0);
    const T* key2 = k.data() + k_layout.at(b, keys[n + 2], h, 0);
    const T* key3 = k.data() + k_layout.at(b, keys[n + 3], h, 0);
    dot0 = 0;
    dot1 = 0;
    dot2 = 0;
    dot3 = 0;
    for (std::int64_t d = 0; d < q_layout.dim; ++d) {
      const T& q_d = query[d * q_step];
      mul_into(product, q_d, key0[d * k_step]);
      add_into(dot0, dot0, product);
      mul_into(product, q_d, key1[d * k_step]);
      add_into(dot1, dot1, product);
      mul_into(product, q_d, key2[d * k_step]);
      add_into(dot2, dot2, product);
      mul_into(product, q_d, key3[d * k_step]);
      add_into(dot3, dot3, product);
    }
    mul_into(scores[n], dot0, scale);
    mul_into(scores[n + 1], dot1, scale);
    mul_into(scores[n + 2], dot2, scale);
    mul_into(scores[n + 3], dot3, scale);
  }
  for (; n < keys.size(); ++n) {
    const T* key = k.data() + k_layout.at(b, keys[n], h, 0);
    dot0 = 0;
    for (std::int64_t d = 0; d < q_layout.dim; ++d) {
      mul_into(product, query[d * q_step], key[d * k_step]);
      add_into(dot0, dot0, product);
    }
    mul_into(scores[n], dot0, scale);
  }
}

template <typename T>
void check_attention_shapes(const Tensor<T>& q, const std::vector<std::int64_t>& q_pos,
                            const Tensor<T>& k, const Tensor<T>& v,
                            const std::vector<std::int64_t>& k_pos) {
  const Shape& q_shape = q.shape();
  const Shape& k_shape = k.shape();
  SHARDSIM_ASSERT(k_shape == v.shape(), "attention: k and v differ in shape");
  SHARDSIM_ASSERT(q_shape.extent("batch") == k_shape.extent("batch") &&
                      q_shape.extent("head") == k_shape.extent("head") &&
                      q_shape.extent("head_dim") == k_shape.extent("head_dim"),
                  "attention: q and k differ in batch, head or head_dim");
  SHARDSIM_ASSERT(static_cast<std::int64_t>(q_pos.size()) == q_shape.extent("seq") &&
                      static_cast<std::int64_t>(k_pos.size()) == k_shape.extent("kv"),
                  "attention: one position per query and per key");
}

// Runs f(b, h) for every (batch, head) pair, the pairs concurrently (parallel.hpp). A pair's
// query rows, its saved row statistics and its slices of dq, dk and dv (all indexed by b and h)
// belong to it alone, and f visits the pair's rows in ascending order as a serial loop would, so
// every value and every accumulation order is the same for any thread count.
template <typename F>
void for_each_head(const HeadStrides& layout, F&& f) {
  parallel_for(layout.batch * layout.heads,
               [&](std::int64_t pair) { f(pair / layout.heads, pair % layout.heads); });
}

}  // namespace detail
}  // namespace shardsim

// row_gradients and row_value_gradients (they use HeadStrides above).
#include "ops/attention/attention_rows-inl.hpp"  // IWYU pragma: keep

namespace shardsim {

template <typename T>
void attention_forward(const Tensor<T>& q, const std::vector<std::int64_t>& q_pos,
                       const Tensor<T>& k, const Tensor<T>& v,
                       const std::vector<std::int64_t>& k_pos, const AttentionParams& params,
                       Tensor<T>& out, AttentionSaved<T>& saved) {
  using std::log;
  using std::sqrt;
  detail::check_attention_shapes(q, q_pos, k, v, k_pos);
  const detail::HeadStrides q_layout(q.shape(), "seq");
  const detail::HeadStrides k_layout(k.shape(), "kv");
  out = Tensor<T>(q.shape());
  const Shape rows = q.shape().without("head_dim");  // (batch, seq, head)
  saved.max = Tensor<T>(rows);
  saved.sum = Tensor<T>(rows);
  saved.lse = Tensor<T>(rows);
  const detail::RowStrides row_layout(rows);
  const T scale = T(1) / sqrt(T(q_layout.dim));
  detail::for_each_head(q_layout, [&](std::int64_t b, std::int64_t h) {
    // dd/qd: the pair's k_j and, per d, its v_jd over j, unpacked once (dot_sum.hpp).
    detail::DotOperands<T> key_rows, value_cols;
    key_rows.assign(
        k_layout.positions, k_layout.dim,
        [&](std::int64_t j, std::int64_t d) -> const T& { return k[k_layout.at(b, j, h, d)]; });
    value_cols.assign(
        k_layout.dim, k_layout.positions,
        [&](std::int64_t d, std::int64_t j) -> const T& { return v[k_layout.at(b, j, h, d)]; });
    // The rows in chunks of kRowChunk, a nested loop that idle threads share (parallel.hpp; the
    // slow rank of a causal split need not finish alone). A row reads only the pair's inputs
    // and writes only its own outputs, so no value depends on who runs it.
    constexpr std::int64_t kRowChunk = 16;
    const std::int64_t chunks = (q_layout.positions + kRowChunk - 1) / kRowChunk;
    parallel_for(chunks, [&](std::int64_t chunk) {
      std::vector<std::int64_t> keys;  // the allowed keys of the current row
      std::vector<T> weights;          // per allowed key: s_n, then e_n = exp(s_n - m)
      std::vector<T> weighted_sum;     // (head_dim): sum_n e_n v_n
      const std::int64_t last = std::min(q_layout.positions, (chunk + 1) * kRowChunk);
      for (std::int64_t i = chunk * kRowChunk; i < last; ++i) {
        detail::row_scores(q, q_layout, k, k_layout, b, h, i, q_pos[static_cast<std::size_t>(i)],
                           k_pos, params, scale, key_rows, keys, weights);
        const std::int64_t row = row_layout.at(b, i, h);
        if (keys.empty()) {
          saved.max[row] = negative_infinity<T>();
          saved.sum[row] = T(0);
          saved.lse[row] = negative_infinity<T>();
          continue;  // out stays 0
        }
        T row_max = negative_infinity<T>();  // m
        for (const T& score : weights) {
          if (score > row_max) row_max = score;
        }
        for (T& weight : weights) sub_into(weight, weight, row_max);
        exp_each(weights.data(), static_cast<std::int64_t>(weights.size()));
        T row_sum = T(0);  // l
        for (const T& weight : weights) add_into(row_sum, row_sum, weight);
        // out_d = (sum_n e_n v_nd) / l.
        detail::row_weighted_sum(v, k_layout, b, h, keys, weights, value_cols, weighted_sum);
        for (std::int64_t d = 0; d < q_layout.dim; ++d) {
          out[q_layout.at(b, i, h, d)] = weighted_sum[d] / row_sum;
        }
        saved.max[row] = row_max;
        saved.sum[row] = row_sum;
        saved.lse[row] = row_max + log(row_sum);
      }
    });
  });
}

template <typename T>
void attention_backward(const Tensor<T>& dout, const Tensor<T>& q,
                        const std::vector<std::int64_t>& q_pos, const Tensor<T>& k,
                        const Tensor<T>& v, const std::vector<std::int64_t>& k_pos,
                        const AttentionSaved<T>& saved, const AttentionParams& params,
                        Tensor<T>& dq, Tensor<T>& dk, Tensor<T>& dv) {
  using std::sqrt;
  detail::check_attention_shapes(q, q_pos, k, v, k_pos);
  const detail::HeadStrides q_layout(q.shape(), "seq");
  const detail::HeadStrides k_layout(k.shape(), "kv");
  const detail::RowStrides row_layout(saved.sum.shape());
  dq = Tensor<T>(q.shape());
  dk = Tensor<T>(k.shape());
  dv = Tensor<T>(v.shape());
  const T scale = T(1) / sqrt(T(q_layout.dim));
  detail::for_each_head(q_layout, [&](std::int64_t b, std::int64_t h) {
    std::vector<std::int64_t> keys;  // the allowed keys of the current row
    std::vector<T> probs;            // per allowed key: s_n, then p_n
    std::vector<T> dscores;          // per allowed key: dp_n, then ds_n
    detail::DotSum<T> total;         // D (dd/qd: exact, rounded once)
    const detail::HeadOperands<T> kv(k, v, k_layout, b, h);
    for (std::int64_t i = 0; i < q_layout.positions; ++i) {
      const std::int64_t row = row_layout.at(b, i, h);
      const T row_sum = saved.sum[row];  // l
      if (!(row_sum > T(0))) continue;   // no allowed key: no gradient
      const T row_max = saved.max[row];  // m
      detail::row_scores(q, q_layout, k, k_layout, b, h, i, q_pos[static_cast<std::size_t>(i)],
                         k_pos, params, scale, kv.key_rows, keys, probs);
      for (T& prob : probs) prob = prob - row_max;
      exp_each(probs.data(), static_cast<std::int64_t>(probs.size()));
      for (T& prob : probs) prob = prob / row_sum;
      detail::row_value_gradients(dout, q_layout, v, k_layout, b, h, i, kv, keys, dscores);
      total.clear();  // D = sum_n p_n dp_n
      for (std::size_t n = 0; n < keys.size(); ++n) total.add(probs[n], dscores[n]);
      const T& row_total = total.value();  // a reference at mp (no copy), a value at dd/qd
      for (std::size_t n = 0; n < keys.size(); ++n) {
        sub_into(dscores[n], dscores[n], row_total);
        mul_into(dscores[n], probs[n], dscores[n]);
      }
      detail::row_gradients(dout, q, q_layout, k, k_layout, b, h, i, kv, keys, probs, dscores,
                            scale, false, dq, dk, dv);
    }
  });
}

template <typename T>
void attention_block_backward(const Tensor<T>& dout, const Tensor<T>& q,
                              const std::vector<std::int64_t>& q_pos, const Tensor<T>& k,
                              const Tensor<T>& v, const std::vector<std::int64_t>& k_pos,
                              const Tensor<T>& out, const Tensor<T>& lse,
                              const AttentionParams& params, Tensor<T>& dq, Tensor<T>& dk,
                              Tensor<T>& dv) {
  using std::isinf;
  using std::sqrt;
  detail::check_attention_shapes(q, q_pos, k, v, k_pos);
  SHARDSIM_ASSERT(dq.shape() == q.shape() && dk.shape() == k.shape() && dv.shape() == v.shape(),
                  "attention_block_backward accumulates into buffers shaped like q, k, v");
  const detail::HeadStrides q_layout(q.shape(), "seq");
  const detail::HeadStrides k_layout(k.shape(), "kv");
  const detail::RowStrides row_layout(lse.shape());
  const T scale = T(1) / sqrt(T(q_layout.dim));
  detail::for_each_head(q_layout, [&](std::int64_t b, std::int64_t h) {
    std::vector<std::int64_t> keys;  // the allowed keys of the current row in this block
    std::vector<T> probs;            // per allowed key: s_n, then p_n = exp(s_n - lse_i)
    std::vector<T> dscores;          // per allowed key: dp_n, then ds_n
    detail::DotSum<T> total;         // D_i (dd/qd: exact, rounded once)
    const detail::HeadOperands<T> kv(k, v, k_layout, b, h);
    for (std::int64_t i = 0; i < q_layout.positions; ++i) {
      const T row_lse = lse[row_layout.at(b, i, h)];
      if (isinf(row_lse)) continue;  // -inf: no allowed key in any block
      detail::row_scores(q, q_layout, k, k_layout, b, h, i, q_pos[static_cast<std::size_t>(i)],
                         k_pos, params, scale, kv.key_rows, keys, probs);
      if (keys.empty()) continue;
      // D_i = dout_i . out_i. At dd/qd an exact dot, as dp_n = dout_i . v_n is: a row with one
      // key has out_i = v_n in value, so D_i = dp_n and ds_n = 0 exactly, as at mp.
      total.clear();
      for (std::int64_t d = 0; d < q_layout.dim; ++d) {
        total.add(dout[q_layout.at(b, i, h, d)], out[q_layout.at(b, i, h, d)]);
      }
      const T& row_total = total.value();  // a reference at mp (no copy), a value at dd/qd
      detail::row_value_gradients(dout, q_layout, v, k_layout, b, h, i, kv, keys, dscores);
      for (std::size_t n = 0; n < keys.size(); ++n) probs[n] = probs[n] - row_lse;
      exp_each(probs.data(), static_cast<std::int64_t>(keys.size()));
      for (std::size_t n = 0; n < keys.size(); ++n) {
        sub_into(dscores[n], dscores[n], row_total);
        mul_into(dscores[n], probs[n], dscores[n]);
      }
      detail::row_gradients(dout, q, q_layout, k, k_layout, b, h, i, kv, keys, probs, dscores,
                            scale, true, dq, dk, dv);
    }
  });
}

template <typename T>
void attention_merge(Tensor<T>& out, Tensor<T>& lse, const Tensor<T>& block_out,
                     const Tensor<T>& block_lse) {
  using std::exp;
  using std::isinf;
  using std::log;
  SHARDSIM_ASSERT(out.shape() == block_out.shape() && lse.shape() == block_lse.shape(),
                  "attention_merge: partial results differ in shape");
  const detail::HeadStrides out_layout(out.shape(), "seq");
  const detail::RowStrides row_layout(lse.shape());
  for (std::int64_t b = 0; b < out_layout.batch; ++b) {
    for (std::int64_t i = 0; i < out_layout.positions; ++i) {
      for (std::int64_t h = 0; h < out_layout.heads; ++h) {
        const std::int64_t row = row_layout.at(b, i, h);
        const T lse_block = block_lse[row];
        if (isinf(lse_block) && lse_block < T(0)) continue;  // fully masked block: no-op
        const T lse_running = lse[row];
        if (isinf(lse_running) && lse_running < T(0)) {
          for (std::int64_t d = 0; d < out_layout.dim; ++d) {
            out[out_layout.at(b, i, h, d)] = block_out[out_layout.at(b, i, h, d)];
          }
          lse[row] = lse_block;
          continue;
        }
        const T lse_max = lse_running > lse_block ? lse_running : lse_block;  // m
        const T running_weight = exp(lse_running - lse_max);                  // a
        const T block_weight = exp(lse_block - lse_max);                      // c
        const T total_weight = running_weight + block_weight;                 // w
        for (std::int64_t d = 0; d < out_layout.dim; ++d) {
          const std::int64_t at = out_layout.at(b, i, h, d);
          out[at] = (out[at] * running_weight + block_out[at] * block_weight) / total_weight;
        }
        lse[row] = lse_max + log(total_weight);
      }
    }
  }
}

}  // namespace shardsim

// Explicit instantiation list: the op's .cpp instantiates float and double, and CMakeLists.txt
// finds this macro and generates the Mp, NarrowFloat, Dd and Qd units.
#define SHARDSIM_INSTANTIATE_ATTENTION(T)                                                        \
  template void attention_forward(                                                               \
      const Tensor<T>&, const std::vector<std::int64_t>&, const Tensor<T>&, const Tensor<T>&,    \
      const std::vector<std::int64_t>&, const AttentionParams&, Tensor<T>&, AttentionSaved<T>&); \
  template void attention_backward(                                                              \
      const Tensor<T>&, const Tensor<T>&, const std::vector<std::int64_t>&, const Tensor<T>&,    \
      const Tensor<T>&, const std::vector<std::int64_t>&, const AttentionSaved<T>&,              \
      const AttentionParams&, Tensor<T>&, Tensor<T>&, Tensor<T>&);                               \
  template void attention_block_backward(                                                        \
      const Tensor<T>&, const Tensor<T>&, const std::vector<std::int64_t>&, const Tensor<T>&,    \
      const Tensor<T>&, const std::vector<std::int64_t>&, const Tensor<T>&, const Tensor<T>&,    \
      const AttentionParams&, Tensor<T>&, Tensor<T>&, Tensor<T>&);                               \
  template void attention_merge(Tensor<T>&, Tensor<T>&, const Tensor<T>&, const Tensor<T>&);
