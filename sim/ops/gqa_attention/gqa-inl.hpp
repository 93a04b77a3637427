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

// RoPE at positions 0 .. seq-1, or a copy without RoPE.
template <typename T>
Tensor<T> rotate(const Tensor<T>& t, const GqaParams& p, bool inverse) {
  if (!p.rope) return t;
  const std::vector<std::int64_t> positions = position_range(0, t.shape().extent("seq"));
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
        out[(r * heads + h) * dim + d] = kv[(r * kv_heads + map[static_cast<std::size_t>(h)]) *
                                                dim + d];
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
void gqa_forward(const Tensor<T>& x, const Tensor<T>& wq, const Tensor<T>& wk, const Tensor<T>& wv,
                 const Tensor<T>& wo, const GqaParams& params, GqaActivations<T>& acts) {
  using namespace gqa_detail;
  Tensor<T> k, v;
  project_heads(x, wq, acts.q);
  project_heads(x, renamed(wk, "kv_head", "head"), k);
  project_heads(x, renamed(wv, "kv_head", "head"), v);
  const Tensor<T> k_rot = rotate(k, params, false);
  acts.q_rot = rotate(acts.q, params, false);
  const std::vector<std::int64_t> map =
      kv_of_heads(params, acts.q.shape().extent("head"), k.shape().extent("head"));
  const std::vector<std::int64_t> positions = position_range(0, x.shape().extent("seq"));
  attention_forward(acts.q_rot, positions, expand(k_rot, map), expand(v, map), positions,
                    AttentionParams{}, acts.attn, acts.core);
  acts.lse = acts.core.lse;
  project_out(acts.attn, wo, acts.y);
  acts.k = renamed(k, "head", "kv_head");
  acts.v = renamed(v, "head", "kv_head");
  acts.k_rot = renamed(k_rot, "head", "kv_head");
}

template <typename T>
void gqa_backward(const Tensor<T>& dy, const Tensor<T>& x, const Tensor<T>& wq, const Tensor<T>& wk,
                  const Tensor<T>& wv, const Tensor<T>& wo, const GqaActivations<T>& acts,
                  const GqaParams& params, GqaGrads<T>& grads, Tensor<T>& dwq, Tensor<T>& dwk,
                  Tensor<T>& dwv, Tensor<T>& dwo) {
  using namespace gqa_detail;
  project_out_backward(dy, acts.attn, wo, grads.attn, dwo);
  const Tensor<T> k_rot = renamed(acts.k_rot, "kv_head", "head");
  const Tensor<T> v = renamed(acts.v, "kv_head", "head");
  const std::int64_t kv_heads = k_rot.shape().extent("head");
  const std::vector<std::int64_t> map =
      kv_of_heads(params, acts.q.shape().extent("head"), kv_heads);
  const std::vector<std::int64_t> positions = position_range(0, x.shape().extent("seq"));
  Tensor<T> dk_exp, dv_exp;
  attention_backward(grads.attn, acts.q_rot, positions, expand(k_rot, map), expand(v, map),
                     positions, acts.core, AttentionParams{}, grads.q_rot, dk_exp, dv_exp);
  const Tensor<T> dk_rot = reduce(dk_exp, map, kv_heads);
  const Tensor<T> dv = reduce(dv_exp, map, kv_heads);
  grads.q = rotate(grads.q_rot, params, true);
  const Tensor<T> dk = rotate(dk_rot, params, true);
  Tensor<T> dx_q, dx_k, dx_v;
  project_heads_backward(grads.q, x, wq, dx_q, dwq);
  Tensor<T> dwk_h = renamed(dwk, "kv_head", "head");
  Tensor<T> dwv_h = renamed(dwv, "kv_head", "head");
  project_heads_backward(dk, x, renamed(wk, "kv_head", "head"), dx_k, dwk_h);
  project_heads_backward(dv, x, renamed(wv, "kv_head", "head"), dx_v, dwv_h);
  dwk = renamed(dwk_h, "head", "kv_head");
  dwv = renamed(dwv_h, "head", "kv_head");
  grads.k_rot = renamed(dk_rot, "head", "kv_head");
  grads.k = renamed(dk, "head", "kv_head");
  grads.v = renamed(dv, "head", "kv_head");
  grads.x = Tensor<T>(x.shape());
  for (std::int64_t i = 0; i < x.numel(); ++i) grads.x[i] = (dx_q[i] + dx_k[i]) + dx_v[i];
}

}  // namespace shardsim

// Explicit instantiation list: gqa.cpp instantiates float and double, and CMakeLists.txt finds
// this macro and generates the Mp, NarrowFloat, Dd and Qd units.
#define SHARDSIM_INSTANTIATE_GQA(T)                                                            \
  template void gqa_forward(const Tensor<T>&, const Tensor<T>&, const Tensor<T>&,             \
                            const Tensor<T>&, const Tensor<T>&, const GqaParams&,             \
                            GqaActivations<T>&);                                              \
  template void gqa_backward(const Tensor<T>&, const Tensor<T>&, const Tensor<T>&,            \
                             const Tensor<T>&, const Tensor<T>&, const Tensor<T>&,            \
                             const GqaActivations<T>&, const GqaParams&, GqaGrads<T>&,        \
                             Tensor<T>&, Tensor<T>&, Tensor<T>&, Tensor<T>&);
