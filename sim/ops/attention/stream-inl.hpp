// Template bodies of ops/attention/stream.hpp.
#pragma once

#include "ops/attention/stream.hpp"

namespace shardsim {

template <typename T>
void stream_attention_forward(const Tensor<T>& x, const Tensor<T>& wq, const Tensor<T>& wk,
                              const Tensor<T>& wv, const Tensor<T>& wo,
                              const StreamAttentionParams& params, KvCache<T>& cache,
                              StreamAttentionActivations<T>& acts) {
  project_heads(x, wq, acts.q);
  project_heads(x, wk, acts.k);
  project_heads(x, wv, acts.v);
  const Shape& chunk_shape = acts.q.shape();  // (batch, seq=t, head, head_dim)
  const std::int64_t chunk_length = chunk_shape.extent("seq");
  if (cache.k.shape().rank() == 0) {
    const Shape empty = head_shape(chunk_shape.extent("batch"), "kv", 0, chunk_shape.extent("head"),
                                   chunk_shape.extent("head_dim"));
    cache.k = Tensor<T>(empty);
    cache.v = Tensor<T>(empty);
  }
  const std::int64_t first = cache.next_position;
  const std::int64_t cached = cache.length();
  acts.first_position = first;
  acts.cache_length = cached;
  acts.cache_k = cache.k;
  acts.cache_v = cache.v;

  const std::vector<std::int64_t> q_pos = position_range(first, chunk_length);
  RopeParams rope = params.rope;
  rope.pos_axis = "seq";
  rope_forward(acts.q, q_pos, rope, acts.q_rot);
  Tensor<T> k_rot;  // (batch, seq=t, head, head_dim)
  rope_forward(acts.k, q_pos, rope, k_rot);
  // The chunk's keys and values renamed onto the KV axis: (batch, kv=t, head, head_dim).
  const Tensor<T> k_kv =
      acts.k.reshaped(head_shape(chunk_shape.extent("batch"), "kv", chunk_length,
                                 chunk_shape.extent("head"), chunk_shape.extent("head_dim")));
  const Tensor<T> k_rot_kv = k_rot.reshaped(k_kv.shape());
  const Tensor<T> v_kv = acts.v.reshaped(k_kv.shape());
  acts.k_cat = concat_along(cache.k, k_kv, "kv");
  acts.k_all = concat_along(cache.k, k_rot_kv, "kv");
  acts.v_all = concat_along(cache.v, v_kv, "kv");

  const std::vector<std::int64_t> k_pos = position_range(first - cached, cached + chunk_length);
  attention_forward(acts.q_rot, q_pos, acts.k_all, acts.v_all, k_pos, params.attention, acts.attn,
                    acts.core);
  project_out(acts.attn, wo, acts.y);

  const std::int64_t keep = kv_cache_length(params.attention.window, cached + chunk_length);
  cache.k = slice_along(acts.k_all, "kv", cached + chunk_length - keep, keep);
  cache.v = slice_along(acts.v_all, "kv", cached + chunk_length - keep, keep);
  cache.next_position = first + chunk_length;
}

template <typename T>
void stream_attention_backward(const Tensor<T>& dy, const Tensor<T>& x, const Tensor<T>& wq,
                               const Tensor<T>& wk, const Tensor<T>& wv, const Tensor<T>& wo,
                               const StreamAttentionActivations<T>& acts,
                               const StreamAttentionParams& params, StreamAttentionGrads<T>& grads,
                               Tensor<T>& dwq, Tensor<T>& dwk, Tensor<T>& dwv, Tensor<T>& dwo) {
  const std::int64_t first = acts.first_position;
  const std::int64_t cached = acts.cache_length;
  const std::int64_t chunk_length = acts.q.shape().extent("seq");
  project_out_backward(dy, acts.attn, wo, grads.attn, dwo);
  const std::vector<std::int64_t> q_pos = position_range(first, chunk_length);
  const std::vector<std::int64_t> k_pos = position_range(first - cached, cached + chunk_length);
  attention_backward(grads.attn, acts.q_rot, q_pos, acts.k_all, acts.v_all, k_pos, acts.core,
                     params.attention, grads.q_rot, grads.k_all, grads.v_all);

  RopeParams rope = params.rope;
  rope.pos_axis = "seq";
  rope_backward(grads.q_rot, q_pos, rope, grads.q);
  // k_cat = cache_k ++ k: the cache part passes the gradient through unchanged (and stops: the
  // cache is detached); the chunk part goes back through RoPE.
  rope.pos_axis = "kv";
  Tensor<T> dk_chunk;  // (batch, kv=t, head, head_dim)
  rope_backward(slice_along(grads.k_all, "kv", cached, chunk_length), q_pos, rope, dk_chunk);
  grads.k_cat = concat_along(slice_along(grads.k_all, "kv", 0, cached), dk_chunk, "kv");
  grads.k = dk_chunk.reshaped(acts.k.shape());
  grads.v = slice_along(grads.v_all, "kv", cached, chunk_length).reshaped(acts.v.shape());

  Tensor<T> dx_k;  // (batch, seq=t, hidden), like dx_v
  Tensor<T> dx_v;
  project_heads_backward(grads.q, x, wq, grads.x, dwq);
  project_heads_backward(grads.k, x, wk, dx_k, dwk);
  project_heads_backward(grads.v, x, wv, dx_v, dwv);
  for (std::int64_t i = 0; i < grads.x.numel(); ++i) grads.x[i] = (grads.x[i] + dx_k[i]) + dx_v[i];
}

}  // namespace shardsim

// Explicit instantiation list: the op's .cpp instantiates float and double, and CMakeLists.txt
// finds this macro and generates the Mp, NarrowFloat, Dd and Qd units.
#define SHARDSIM_INSTANTIATE_ATTENTION_STREAM(T)                                                \
  template void stream_attention_forward(                                                       \
      const Tensor<T>&, const Tensor<T>&, const Tensor<T>&, const Tensor<T>&, const Tensor<T>&, \
      const StreamAttentionParams&, KvCache<T>&, StreamAttentionActivations<T>&);               \
  template void stream_attention_backward(                                                      \
      const Tensor<T>&, const Tensor<T>&, const Tensor<T>&, const Tensor<T>&, const Tensor<T>&, \
      const Tensor<T>&, const StreamAttentionActivations<T>&, const StreamAttentionParams&,     \
      StreamAttentionGrads<T>&, Tensor<T>&, Tensor<T>&, Tensor<T>&, Tensor<T>&);
