// Sliding-window attention kernels: masked softmax attention over one rank's queries and one
// block of keys, its backward, and the log-sum-exp merge of partial results (the q/k/v/o
// projections are in attention/project.hpp). Per-rank kernels and dense oracle alike; they never
// see the world.
//
// Layouts (named axes; index arithmetic goes through stride_of):
//   q, out, dout   (batch, seq, head, head_dim)   queries of this chunk (or a shard of them)
//   k, v           (batch, kv, head, head_dim)    keys/values (the KV axis, or one block of it)
//   lse, max, sum  (batch, seq, head)
// Mask: key j is allowed for query i iff 0 <= q_pos(i) - k_pos(j) < window (window = none: plain
// causal, 0 <= q_pos(i) - k_pos(j)). Positions are absolute stream positions given by the caller.
//
// Forward, per (batch b, head h, query i), over the allowed keys j in ascending kv order,
// with scale = 1 / sqrt(T(head_dim)) and every dot product summed over ascending head_dim:
//   s_j   = (q_i . k_j) * scale
//   m     = max_j s_j
//   e_j   = exp(s_j - m)
//   l     = sum_j e_j
//   out_i = (sum_j e_j * v_j) / l             (one division per element)
//   lse_i = m + log(l)
// A query with no allowed key in the block gets out_i = 0 and lse_i = m = -inf, l = 0.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.hpp"

namespace shardsim {

// Row-major stride of `axis` in `shape`: the product of the extents of the axes after it.
inline std::int64_t stride_of(const Shape& shape, std::string_view axis) {
  std::int64_t stride = 1;
  for (std::size_t a = shape.position(axis) + 1; a < shape.rank(); ++a) stride *= shape[a].extent;
  return stride;
}

template <typename T>
T negative_infinity() {
  return -std::numeric_limits<T>::infinity();
}

struct AttentionParams {
  std::optional<std::int64_t> window;  // none: plain causal. REQUIRES: >= 1 when set
  // The window_off_by_one fault: also allows q_pos - k_pos == window. Only a faulty sharded plan
  // sets it; the oracle never does.
  bool window_inclusive = false;
};

inline bool attention_allowed(const AttentionParams& params, std::int64_t q_pos,
                              std::int64_t k_pos) {
  const std::int64_t delta = q_pos - k_pos;
  if (delta < 0) return false;
  if (!params.window) return true;
  return params.window_inclusive ? delta <= *params.window : delta < *params.window;
}

// What forward keeps for backward, each (batch, seq, head).
template <typename T>
struct AttentionSaved {
  Tensor<T> max;  // m
  Tensor<T> sum;  // l
  Tensor<T> lse;  // m + log(l)
};

// q: (batch, seq, head, head_dim), k, v: (batch, kv, head, head_dim) -> out like q.
// q_pos: one position per seq index; k_pos: one per kv index.
template <typename T>
void attention_forward(const Tensor<T>& q, const std::vector<std::int64_t>& q_pos,
                       const Tensor<T>& k, const Tensor<T>& v,
                       const std::vector<std::int64_t>& k_pos, const AttentionParams& params,
                       Tensor<T>& out, AttentionSaved<T>& saved);

// Dense backward from the saved softmax, per (b, h, i) with l > 0, keys j ascending:
//   p_j  = e_j / l                  (e_j recomputed exactly as in forward)
//   dp_j = dout_i . v_j
//   D    = sum_j p_j * dp_j
//   ds_j = p_j * (dp_j - D)
//   dq_i  = (sum_j ds_j * k_j) * scale                           term 1: through the scores
//   dk_j += (ds_j * q_i) * scale   (queries i ascending)         term 2: keys
//   dv_j += p_j * dout_i           (queries i ascending)         term 3: values
// Activation grads: dq, dk, dv are written (zeroed first, then the sums above).
template <typename T>
void attention_backward(const Tensor<T>& dout, const Tensor<T>& q,
                        const std::vector<std::int64_t>& q_pos, const Tensor<T>& k,
                        const Tensor<T>& v, const std::vector<std::int64_t>& k_pos,
                        const AttentionSaved<T>& saved, const AttentionParams& params,
                        Tensor<T>& dq, Tensor<T>& dk, Tensor<T>& dv);

// One block's share of the backward from the merged results (FlashAttention-2 / ring attention):
//   D_i  = dout_i . out_i            (out, lse: the MERGED forward results over all blocks)
//   p_j  = exp(s_j - lse_i)
//   dp_j = dout_i . v_j,  ds_j = p_j * (dp_j - D_i)
//   dq_i += (sum_j ds_j * k_j) * scale,  dk_j += (ds_j * q_i) * scale,  dv_j += p_j * dout_i
// Accumulates (+=) into dq (like q), dk, dv (like k, v): the caller sums the blocks. Queries
// with lse = -inf have no allowed key anywhere and contribute nothing.
template <typename T>
void attention_block_backward(const Tensor<T>& dout, const Tensor<T>& q,
                              const std::vector<std::int64_t>& q_pos, const Tensor<T>& k,
                              const Tensor<T>& v, const std::vector<std::int64_t>& k_pos,
                              const Tensor<T>& out, const Tensor<T>& lse,
                              const AttentionParams& params, Tensor<T>& dq, Tensor<T>& dk,
                              Tensor<T>& dv);

// Merges a block's partial result into the running one, per (b, i, h) row (log-sum-exp merge):
//   block lse = -inf            keep (out, lse)             (a fully masked block; no NaN)
//   running lse = -inf          take (block_out, block_lse) unchanged
//   otherwise   m = max(lse, lse_b), a = exp(lse - m), c = exp(lse_b - m), w = a + c,
//               out = (out * a + block_out * c) / w,  lse = m + log(w)
// Starting from out = 0, lse = -inf, the first block is taken bit for bit.
template <typename T>
void attention_merge(Tensor<T>& out, Tensor<T>& lse, const Tensor<T>& block_out,
                     const Tensor<T>& block_lse);

// (batch, POS, head, head_dim) with the given extents, outermost first.
Shape head_shape(std::int64_t batch, const std::string& pos_axis, std::int64_t positions,
                 std::int64_t heads, std::int64_t head_dim);

// Positions [begin, begin + count) of `src` along `axis`, as a new tensor.
template <typename T>
Tensor<T> slice_along(const Tensor<T>& src, const std::string& axis, std::int64_t begin,
                      std::int64_t count) {
  Tensor<T> out(src.shape().with_extent(axis, count));
  copy_along(src, axis, begin, out, 0, count);
  return out;
}

// a ++ b along `axis`. REQUIRES: the other axes agree.
template <typename T>
Tensor<T> concat_along(const Tensor<T>& a, const Tensor<T>& b, const std::string& axis) {
  const std::int64_t a_count = a.shape().extent(axis);
  const std::int64_t b_count = b.shape().extent(axis);
  Tensor<T> out(a.shape().with_extent(axis, a_count + b_count));
  copy_along(a, axis, 0, out, 0, a_count);
  copy_along(b, axis, 0, out, a_count, b_count);
  return out;
}

}  // namespace shardsim
