// Causal self-attention with grouped key/value heads (GQA; MQA at one kv head; MHA when every
// query head has its own), dense oracle and per-rank kernel alike: the same function runs on the
// whole tensors (the oracle) and on a tensor-parallel rank's slices of heads (gqa_plan.hpp).
//
// Layouts: x, y (batch, seq, hidden); wq (hidden, head, head_dim); wk, wv (hidden, kv_head,
// head_dim); wo (head, head_dim, hidden); q, q_rot, attn (batch, seq, head, head_dim); k, k_rot, v
// (batch, seq, kv_head, head_dim). With H query heads and KV kv heads, G = H / KV:
//   q, k, v  = x wq, x wk, x wv            (ops/attention/project.hpp: one accumulator per value,
//                                            hidden ascending)
//   q_rot    = rope(q), k_rot = rope(k)    at positions 0 .. seq-1 (ops/attention/rope.hpp); none
//                                            without RoPE
//   attn     = causal softmax attention of q_rot over k_rot and v, query head h reading kv head
//              h / G (ops/attention/attention.hpp: scale 1/sqrt(head_dim), keys ascending)
//   y        = attn wo                     (head, then head_dim ascending)
// Backward: dattn and dwo from dy; per query head the attention backward into its kv head's
// gradient, the G query heads of a group summed in ascending head order; RoPE's inverse; the
// projections; dx = (dx_q + dx_k) + dx_v.
//
// On a rank, the tensors hold a slice of heads: query heads [head_offset, head_offset + H_local)
// and kv heads [kv_offset, kv_offset + KV_local), and the mapping uses global head numbers. The
// gqa_wrong_group fault reads kv head h % KV instead of h / G.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/attention/attention.hpp"
#include "ops/attention/rope.hpp"

namespace shardsim {

struct GqaParams {
  std::int64_t n_head = 1;     // H, the whole model's
  std::int64_t n_kv_head = 1;  // KV
  std::int64_t head_offset = 0;
  std::int64_t kv_offset = 0;
  bool rope = true;
  RopeParams rope_params;
  bool wrong_group = false;  // the gqa_wrong_group fault (sharded plans only)
};

// The global kv head query head `head` (global) reads.
inline std::int64_t gqa_kv_head(const GqaParams& p, std::int64_t head) {
  return p.wrong_group ? head % p.n_kv_head : head / (p.n_head / p.n_kv_head);
}

template <typename T>
struct GqaActivations {
  Tensor<T> q, k, v, q_rot, k_rot, attn, y;
  Tensor<T> lse;  // (batch, seq, head)
  AttentionSaved<T> core;
};

template <typename T>
struct GqaGrads {
  Tensor<T> attn, q_rot, k_rot, v, q, k, x;
};

// REQUIRES: the shapes above; every query head's kv head among [kv_offset, kv_offset + KV_local).
template <typename T>
void gqa_forward(const Tensor<T>& x, const Tensor<T>& wq, const Tensor<T>& wk, const Tensor<T>& wv,
                 const Tensor<T>& wo, const GqaParams& params, GqaActivations<T>& acts);

// dy (batch, seq, hidden). Activation grads written into `grads`; dwq, dwk, dwv, dwo accumulate
// (+=): zero them first for a fresh gradient.
template <typename T>
void gqa_backward(const Tensor<T>& dy, const Tensor<T>& x, const Tensor<T>& wq, const Tensor<T>& wk,
                  const Tensor<T>& wv, const Tensor<T>& wo, const GqaActivations<T>& acts,
                  const GqaParams& params, GqaGrads<T>& grads, Tensor<T>& dwq, Tensor<T>& dwk,
                  Tensor<T>& dwv, Tensor<T>& dwo);

// ---- The per-rank pieces: gqa_forward and gqa_backward are these on the whole sequence at
// positions 0 .. seq-1; context parallelism (gqa_cp_plan.hpp) runs them on a rank's tokens at
// their global positions and moves the key/value rows between them. ----

// A rank's rows: q, q_rot (batch, seq, head, head_dim); k, v, k_rot (batch, seq, kv_head,
// head_dim).
template <typename T>
struct GqaRows {
  Tensor<T> q, k, v, q_rot, k_rot;
};

// q, k, v = x wq, x wk, x wv on x's rows; q_rot, k_rot RoPE'd at `positions` (one per seq index).
template <typename T>
void gqa_rows_forward(const Tensor<T>& x, const Tensor<T>& wq, const Tensor<T>& wk,
                      const Tensor<T>& wv, const GqaParams& params,
                      const std::vector<std::int64_t>& positions, GqaRows<T>& rows);

// Queries q_rot at q_pos against one block of rotated keys k_rot and values v (batch, seq,
// kv_head, head_dim) at k_pos, causal on those positions; query head h reads kv head
// gqa_kv_head(h) (a copy of it per query head, then attention_forward). out like q_rot.
template <typename T>
void gqa_attend(const Tensor<T>& q_rot, const std::vector<std::int64_t>& q_pos,
                const Tensor<T>& k_rot, const Tensor<T>& v, const std::vector<std::int64_t>& k_pos,
                const GqaParams& params, Tensor<T>& out, AttentionSaved<T>& saved);

// gqa_attend's backward from its saved softmax (attention_backward): dq written; dk, dv (like
// k_rot, v) written, each kv head the sum of its query heads' gradients in ascending head order.
template <typename T>
void gqa_attend_backward(const Tensor<T>& dout, const Tensor<T>& q_rot,
                         const std::vector<std::int64_t>& q_pos, const Tensor<T>& k_rot,
                         const Tensor<T>& v, const std::vector<std::int64_t>& k_pos,
                         const AttentionSaved<T>& saved, const GqaParams& params, Tensor<T>& dq,
                         Tensor<T>& dk, Tensor<T>& dv);

// One block's share of the backward from the merged out and lse (attention_block_backward, ring
// attention): dq += the block's share; dk, dv += the block's kv-head sums (query heads
// ascending, summed first, then added).
template <typename T>
void gqa_attend_block_backward(const Tensor<T>& dout, const Tensor<T>& q_rot,
                               const std::vector<std::int64_t>& q_pos, const Tensor<T>& k_rot,
                               const Tensor<T>& v, const std::vector<std::int64_t>& k_pos,
                               const Tensor<T>& out, const Tensor<T>& lse, const GqaParams& params,
                               Tensor<T>& dq, Tensor<T>& dk, Tensor<T>& dv);

// From the rows' gradients dq_rot, dk_rot, dv: RoPE's inverse at `positions` (dq, dk written),
// the projections' backward (dwq, dwk, dwv accumulate), dx = (dx_q + dx_k) + dx_v written.
template <typename T>
void gqa_rows_backward(const Tensor<T>& dq_rot, const Tensor<T>& dk_rot, const Tensor<T>& dv,
                       const Tensor<T>& x, const Tensor<T>& wq, const Tensor<T>& wk,
                       const Tensor<T>& wv, const GqaParams& params,
                       const std::vector<std::int64_t>& positions, Tensor<T>& dq, Tensor<T>& dk,
                       Tensor<T>& dx, Tensor<T>& dwq, Tensor<T>& dwk, Tensor<T>& dwv);

}  // namespace shardsim
