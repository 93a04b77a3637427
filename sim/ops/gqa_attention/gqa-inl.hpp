// Template bodies of ops/gqa_attention/gqa.hpp.
#pragma once

#include <string>
#include <string_view>

#include "core/error.hpp"
#include "ops/attention/project.hpp"
#include "ops/gqa_attention/gqa.hpp"

namespace shardsim {

namespace gqa_detail {

// `t` with axis `from` named `to` (the values copied: the projection and RoPE kernels read the
// head axis as "head").
template <typename T>
Tensor<T> renamed(const Tensor<T>& t, std::string_view from, std::string_view to) {
  std::vector<Axis> axes = t.shape().axes();
  for (Axis& a : axes) {
    if (a.name == from) a.name = std::string(to);
  }
  return Tensor<T>(Shape(std::move(axes)), t.values());
}

// RoPE at `positions` (one per seq index), or a copy without RoPE.
template <typename T>
Tensor<T> rotate(const Tensor<T>& t, const std::vector<std::int64_t>& positions, const GqaParams& p,
                 bool inverse) {
  if (!p.rope) return t;
  Tensor<T> out;
  if (inverse) {
    rope_backward(t, positions, p.rope_params, out);
  } else {
    rope_forward(t, positions, p.rope_params, out);
  }
  return out;
}

// The local kv head each local query head reads.
inline std::vector<std::int64_t> kv_of_heads(const GqaParams& p, std::int64_t heads,
                                             std::int64_t kv_heads) {
  std::vector<std::int64_t> out;
  for (std::int64_t h = 0; h < heads; ++h) {
    const std::int64_t kv = gqa_kv_head(p, p.head_offset + h) - p.kv_offset;
    SHARDSIM_ASSERT(kv >= 0 && kv < kv_heads, "gqa: a query head's kv head is not held here");
    out.push_back(kv);
  }
  return out;
}

// (batch, seq, head=KV_local, D) -> (batch, kv=seq, head=H_local, D): query head h's copy of its
// kv head.
template <typename T>
Tensor<T> expand(const Tensor<T>& kv, const std::vector<std::int64_t>& map) {
  const Shape& s = kv.shape();
  const std::int64_t rows = s.extent("batch") * s.extent("seq");
  const std::int64_t kv_heads = s.extent("head");
  const std::int64_t dim = s.extent("head_dim");
  const auto heads = static_cast<std::int64_t>(map.size());
  Tensor<T> out(head_shape(s.extent("batch"), "kv", s.extent("seq"), heads, dim));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t h = 0; h < heads; ++h) {
      for (std::int64_t d = 0; d < dim; ++d) {
        out[(r * heads + h) * dim + d] =
            kv[(r * kv_heads + map[static_cast<std::size_t>(h)]) * dim + d];
      }
    }
  }
  return out;
}

// The transpose of expand: each kv head sums its query heads' gradients, heads ascending.
template <typename T>
Tensor<T> reduce(const Tensor<T>& expanded, const std::vector<std::int64_t>& map,
                 std::int64_t kv_heads) {
  const Shape& s = expanded.shape();
  const std::int64_t rows = s.extent("batch") * s.extent("kv");
  const std::int64_t dim = s.extent("head_dim");
  const auto heads = static_cast<std::int64_t>(map.size());
  Tensor<T> out(head_shape(s.extent("batch"), "seq", s.extent("kv"), kv_heads, dim));
  for (std::int64_t h = 0; h < heads; ++h) {
    const std::int64_t kv = map[static_cast<std::size_t>(h)];
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t d = 0; d < dim; ++d) {
        T& sum = out[(r * kv_heads + kv) * dim + d];
        sum = sum + expanded[(r * heads + h) * dim + d];
      }
    }
  }
  return out;
}

}  // namespace gqa_detail

template <typename T>
void gqa_rows_forward(const Tensor<T>& x, const Tensor<T>& wq, const Tensor<T>& wk,
                      const Tensor<T>& wv, const GqaParams& params,
                      const std::vector<std::int64_t>& positions, GqaRows<T>& rows) {
  using namespace gqa_detail;
  Tensor<T> k, v;
  project_heads(x, wq, rows.q);
  project_heads(x, renamed(wk, "kv_head", "head"), k);
  project_heads(x, renamed(wv, "kv_head", "head"), v);
  const Tensor<T> k_rot = rotate(k, positions, params, false);
  rows.q_rot = rotate(rows.q, positions, params, false);
  rows.k = renamed(k, "head", "kv_head");
  rows.v = renamed(v, "head", "kv_head");
  rows.k_rot = renamed(k_rot, "head", "kv_head");
}

template <typename T>
void gqa_attend(const Tensor<T>& q_rot, const std::vector<std::int64_t>& q_pos,
                const Tensor<T>& k_rot, const Tensor<T>& v, const std::vector<std::int64_t>& k_pos,
                const GqaParams& params, Tensor<T>& out, AttentionSaved<T>& saved) {
  using namespace gqa_detail;
  const std::vector<std::int64_t> map =
      kv_of_heads(params, q_rot.shape().extent("head"), k_rot.shape().extent("kv_head"));
  attention_forward(q_rot, q_pos, expand(renamed(k_rot, "kv_head", "head"), map),
                    expand(renamed(v, "kv_head", "head"), map), k_pos, AttentionParams{}, out,
                    saved);
}

template <typename T>
void gqa_attend_backward(const Tensor<T>& dout, const Tensor<T>& q_rot,
                         const std::vector<std::int64_t>& q_pos, const Tensor<T>& k_rot,
                         const Tensor<T>& v, const std::vector<std::int64_t>& k_pos,
                         const AttentionSaved<T>& saved, const GqaParams& params, Tensor<T>& dq,
                         Tensor<T>& dk, Tensor<T>& dv) {
  using namespace gqa_detail;
  const std::int64_t kv_heads = k_rot.shape().extent("kv_head");
  const std::vector<std::int64_t> map = kv_of_heads(params, q_rot.shape().extent("head"), kv_heads);
  Tensor<T> dk_exp, dv_exp;
  attention_backward(dout, q_rot, q_pos, expand(renamed(k_rot, "kv_head", "head"), map),
                     expand(renamed(v, "kv_head", "head"), map), k_pos, saved, AttentionParams{},
                     dq, dk_exp, dv_exp);
  dk = renamed(reduce(dk_exp, map, kv_heads), "head", "kv_head");
  dv = renamed(reduce(dv_exp, map, kv_heads), "head", "kv_head");
}

template <typename T>
void gqa_attend_block_backward(const Tensor<T>& dout, const Tensor<T>& q_rot,
                               const std::vector<std::int64_t>& q_pos, const Tensor<T>& k_rot,
                               const Tensor<T>& v, const std::vector<std::int64_t>& k_pos,
                               const Tensor<T>& out, const Tensor<T>& lse, const GqaParams& params,
                               Tensor<T>& dq, Tensor<T>& dk, Tensor<T>& dv) {
  using namespace gqa_detail;
  const std::int64_t kv_heads = k_rot.shape().extent("kv_head");
  const std::vector<std::int64_t> map = kv_of_heads(params, q_rot.shape().extent("head"), kv_heads);
  const Tensor<T> k_exp = expand(renamed(k_rot, "kv_head", "head"), map);
  const Tensor<T> v_exp = expand(renamed(v, "kv_head", "head"), map);
  Tensor<T> dk_exp(k_exp.shape());
  Tensor<T> dv_exp(v_exp.shape());
  attention_block_backward(dout, q_rot, q_pos, k_exp, v_exp, k_pos, out, lse, AttentionParams{}, dq,
                           dk_exp, dv_exp);
  const Tensor<T> dk_block = reduce(dk_exp, map, kv_heads);
  const Tensor<T> dv_block = reduce(dv_exp, map, kv_heads);
  for (std::int64_t i = 0; i < dk.numel(); ++i) dk[i] = dk[i] + dk_block[i];
  for (std::int64_t i = 0; i < dv.numel(); ++i) dv[i] = dv[i] + dv_block[i];
}

template <typename T>
void gqa_rows_backward(const Tensor<T>& dq_rot, const Tensor<T>& dk_rot, const Tensor<T>& dv,
                       const Tensor<T>& x, const Tensor<T>& wq, const Tensor<T>& wk,
                       const Tensor<T>& wv, const GqaParams& params,
                       const std::vector<std::int64_t>& positions, Tensor<T>& dq, Tensor<T>& dk,
                       Tensor<T>& dx, Tensor<T>& dwq, Tensor<T>& dwk, Tensor<T>& dwv) {
  using namespace gqa_detail;
  dq = rotate(dq_rot, positions, params, true);
  const Tensor<T> dk_h = rotate(renamed(dk_rot, "kv_head", "head"), positions, params, true);
  Tensor<T> dx_q, dx_k, dx_v;
  project_heads_backward(dq, x, wq, dx_q, dwq);
  Tensor<T> dwk_h = renamed(dwk, "kv_head", "head");
  Tensor<T> dwv_h = renamed(dwv, "kv_head", "head");
  project_heads_backward(dk_h, x, renamed(wk, "kv_head", "head"), dx_k, dwk_h);
  project_heads_backward(renamed(dv, "kv_head", "head"), x, renamed(wv, "kv_head", "head"), dx_v,
                         dwv_h);
  dwk = renamed(dwk_h, "head", "kv_head");
  dwv = renamed(dwv_h, "head", "kv_head");
  dk = renamed(dk_h, "head", "kv_head");
  dx = Tensor<T>(x.shape());
  for (std::int64_t i = 0; i < x.numel(); ++i) dx[i] = (dx_q[i] + dx_k[i]) + dx_v[i];
}

template <typename T>
void gqa_forward(const Tensor<T>& x, const Tensor<T>& wq, const Tensor<T>& wk, const Tensor<T>& wv,
                 const Tensor<T>& wo, const GqaParams& params, GqaActivations<T>& acts) {
  const std::vector<std::int64_t> positions = position_range(0, x.shape().extent("seq"));
  GqaRows<T> rows;
  gqa_rows_forward(x, wq, wk, wv, params, positions, rows);
  gqa_attend(rows.q_rot, positions, rows.k_rot, rows.v, positions, params, acts.attn, acts.core);
  acts.lse = acts.core.lse;
  project_out(acts.attn, wo, acts.y);
  acts.q = std::move(rows.q);
  acts.k = std::move(rows.k);
  acts.v = std::move(rows.v);
  acts.q_rot = std::move(rows.q_rot);
  acts.k_rot = std::move(rows.k_rot);
}

template <typename T>
void gqa_backward(const Tensor<T>& dy, const Tensor<T>& x, const Tensor<T>& wq, const Tensor<T>& wk,
                  const Tensor<T>& wv, const Tensor<T>& wo, const GqaActivations<T>& acts,
                  const GqaParams& params, GqaGrads<T>& grads, Tensor<T>& dwq, Tensor<T>& dwk,
                  Tensor<T>& dwv, Tensor<T>& dwo) {
  const std::vector<std::int64_t> positions = position_range(0, x.shape().extent("seq"));
  project_out_backward(dy, acts.attn, wo, grads.attn, dwo);
  gqa_attend_backward(grads.attn, acts.q_rot, positions, acts.k_rot, acts.v, positions, acts.core,
                      params, grads.q_rot, grads.k_rot, grads.v);
  gqa_rows_backward(grads.q_rot, grads.k_rot, grads.v, x, wq, wk, wv, params, positions, grads.q,
                    grads.k, grads.x, dwq, dwk, dwv);
}

}  // namespace shardsim

// Explicit instantiation list: gqa.cpp instantiates float and double, and CMakeLists.txt finds
// this macro and generates the Mp, NarrowFloat, Dd and Qd units.
#define SHARDSIM_INSTANTIATE_GQA(T)                                                                \
  template void gqa_forward(const Tensor<T>&, const Tensor<T>&, const Tensor<T>&,                  \
                            const Tensor<T>&, const Tensor<T>&, const GqaParams&,                  \
                            GqaActivations<T>&);                                                   \
  template void gqa_backward(const Tensor<T>&, const Tensor<T>&, const Tensor<T>&,                 \
                             const Tensor<T>&, const Tensor<T>&, const Tensor<T>&,                 \
                             const GqaActivations<T>&, const GqaParams&, GqaGrads<T>&, Tensor<T>&, \
                             Tensor<T>&, Tensor<T>&, Tensor<T>&);                                  \
  template void gqa_rows_forward(const Tensor<T>&, const Tensor<T>&, const Tensor<T>&,             \
                                 const Tensor<T>&, const GqaParams&,                               \
                                 const std::vector<std::int64_t>&, GqaRows<T>&);                   \
  template void gqa_attend(const Tensor<T>&, const std::vector<std::int64_t>&, const Tensor<T>&,   \
                           const Tensor<T>&, const std::vector<std::int64_t>&, const GqaParams&,   \
                           Tensor<T>&, AttentionSaved<T>&);                                        \
  template void gqa_attend_backward(                                                               \
      const Tensor<T>&, const Tensor<T>&, const std::vector<std::int64_t>&, const Tensor<T>&,      \
      const Tensor<T>&, const std::vector<std::int64_t>&, const AttentionSaved<T>&,                \
      const GqaParams&, Tensor<T>&, Tensor<T>&, Tensor<T>&);                                       \
  template void gqa_attend_block_backward(                                                         \
      const Tensor<T>&, const Tensor<T>&, const std::vector<std::int64_t>&, const Tensor<T>&,      \
      const Tensor<T>&, const std::vector<std::int64_t>&, const Tensor<T>&, const Tensor<T>&,      \
      const GqaParams&, Tensor<T>&, Tensor<T>&, Tensor<T>&);                                       \
  template void gqa_rows_backward(                                                                 \
      const Tensor<T>&, const Tensor<T>&, const Tensor<T>&, const Tensor<T>&, const Tensor<T>&,    \
      const Tensor<T>&, const Tensor<T>&, const GqaParams&, const std::vector<std::int64_t>&,      \
      Tensor<T>&, Tensor<T>&, Tensor<T>&, Tensor<T>&, Tensor<T>&, Tensor<T>&);
