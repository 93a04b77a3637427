// The dense oracle of one streamed chunk of sliding-window attention with a carried KV cache:
// projections, RoPE, the cache, masked attention and the output projection, forward and backward.
// Plain global tensors; never derived from a sharded plan, so that it can judge one.
//
// A chunk of t tokens sits at absolute positions P .. P+t-1, where P counts the tokens already
// streamed in this training step. With the cache holding L keys at positions P-L .. P-1:
//   q, k, v   = x wq, x wk, x wv                    (batch, seq=t, head, head_dim), raw
//   q_rot     = rope(q, P ..)
//   k_cat     = cache_k ++ k                         (batch, kv=L+t, head, head_dim): the KV axis
//                                                    as a plan shards it (cache RoPE'd, chunk raw)
//   k_all     = cache_k ++ rope(k, P ..)             every key after RoPE
//   v_all     = cache_v ++ v
//   attn, lse = attention(q_rot at P .., k_all and v_all at P-L ..) (ops/attention/attention.hpp)
//   y         = attn wo                              (batch, seq=t, hidden)
//   cache    <- the last C positions of k_all and v_all (K stored AFTER RoPE), P += t.
// Cache length C = min(window - 1, L + t); causal (no window): C = L + t, everything. A later
// query at p >= P + t sees keys with p - k_pos < window, i.e. k_pos >= P + t - (window - 1): the
// last window - 1 keys are all any future query can see, so the cache never drops a usable key.
//
// Backward treats the cache as detached (truncated streaming training): the gradient reaching
// the cache positions of k_all and v_all stops there and never flows into earlier chunks.
#pragma once

#include <cstdint>
#include <optional>

#include "ops/attention/attention.hpp"
#include "ops/attention/project.hpp"
#include "ops/attention/rope.hpp"

namespace shardsim {

struct StreamAttentionParams {
  AttentionParams attention;
  RopeParams rope;  // pos_axis is set per use ("seq" for chunk tensors, "kv" on the KV axis)
};

// The number of keys kept after a chunk, from the `available` = L + t keys of the KV axis.
inline std::int64_t kv_cache_length(const std::optional<std::int64_t>& window,
                                    std::int64_t available) {
  if (!window) return available;
  return available < *window - 1 ? available : *window - 1;
}

// The carried state. An empty cache (before the first chunk) has no shape yet.
template <typename T>
struct KvCache {
  Tensor<T> k;                     // (batch, kv=L, head, head_dim), after RoPE
  Tensor<T> v;                     // (batch, kv=L, head, head_dim)
  std::int64_t next_position = 0;  // P: the absolute position of the next streamed token

  std::int64_t length() const { return k.shape().rank() == 0 ? 0 : k.shape().extent("kv"); }
  void reset() { *this = KvCache<T>(); }
};

// Everything forward computes, by the names the sharded plans record (attention/parts.hpp).
template <typename T>
struct StreamAttentionActivations {
  std::int64_t first_position = 0;  // P
  std::int64_t cache_length = 0;    // L, the cache read by this chunk
  Tensor<T> cache_k, cache_v;       // the cache read by this chunk
  Tensor<T> q, k, v, q_rot, k_cat, k_all, v_all, attn, y;
  AttentionSaved<T> core;
};

// Gradients of the activations (the cache parts of k_cat stop here).
template <typename T>
struct StreamAttentionGrads {
  Tensor<T> attn, q_rot, k_all, v_all, q, k_cat, k, v, x;
};

// x: (batch, seq=t, hidden); wq, wk, wv: (hidden, head, head_dim); wo: (head, head_dim, hidden).
// Reads and updates `cache`.
template <typename T>
void stream_attention_forward(const Tensor<T>& x, const Tensor<T>& wq, const Tensor<T>& wk,
                              const Tensor<T>& wv, const Tensor<T>& wo,
                              const StreamAttentionParams& params, KvCache<T>& cache,
                              StreamAttentionActivations<T>& acts);

// dy: (batch, seq=t, hidden). Activation grads are written into `grads`; dx = (dx_q + dx_k) + dx_v
// elementwise. Parameter grads accumulate (dwq += ..., ...).
template <typename T>
void stream_attention_backward(const Tensor<T>& dy, const Tensor<T>& x, const Tensor<T>& wq,
                               const Tensor<T>& wk, const Tensor<T>& wv, const Tensor<T>& wo,
                               const StreamAttentionActivations<T>& acts,
                               const StreamAttentionParams& params, StreamAttentionGrads<T>& grads,
                               Tensor<T>& dwq, Tensor<T>& dwk, Tensor<T>& dwv, Tensor<T>& dwo);

}  // namespace shardsim
