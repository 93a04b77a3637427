// Template bodies of ops/attention/attention.hpp.
#pragma once

#include <cmath>

#include "shardsim/ops/attention/attention.hpp"

namespace shardsim {

namespace detail {

// Strides and extents of a (batch, POS, head, head_dim) tensor, found by axis name.
struct HeadStrides {
  std::int64_t batch = 0, positions = 0, heads = 0, dim = 0;
  std::int64_t s_batch = 0, s_pos = 0, s_head = 0, s_dim = 0;

  HeadStrides(const Shape& shape, std::string_view pos_axis)
      : batch(shape.extent("batch")),
        positions(shape.extent(pos_axis)),
        heads(shape.extent("head")),
        dim(shape.extent("head_dim")),
        s_batch(stride_of(shape, "batch")),
        s_pos(stride_of(shape, pos_axis)),
        s_head(stride_of(shape, "head")),
        s_dim(stride_of(shape, "head_dim")) {}
  std::int64_t at(std::int64_t b, std::int64_t p, std::int64_t h, std::int64_t d) const {
    return b * s_batch + p * s_pos + h * s_head + d * s_dim;
  }
};

// Strides of a (batch, seq, head) row tensor.
struct RowStrides {
  std::int64_t s_batch = 0, s_seq = 0, s_head = 0;
  explicit RowStrides(const Shape& shape)
      : s_batch(stride_of(shape, "batch")),
        s_seq(stride_of(shape, "seq")),
        s_head(stride_of(shape, "head")) {}
  std::int64_t at(std::int64_t b, std::int64_t i, std::int64_t h) const {
    return b * s_batch + i * s_seq + h * s_head;
  }
};

// The scores s_j = (q_i . k_j) * scale of one query row against the allowed keys, ascending j.
// Each dot product is one accumulator over d ascending; four keys are computed side by side
// (independent accumulators, so the order of every sum is unchanged) to keep the FPU busy.
template <typename T>
void row_scores(const Tensor<T>& q, const HeadStrides& qv, const Tensor<T>& k,
                const HeadStrides& kv, std::int64_t b, std::int64_t h, std::int64_t i,
                std::int64_t q_position, const std::vector<std::int64_t>& k_pos,
                const AttentionParams& params, const T& scale, std::vector<std::int64_t>& keys,
                std::vector<T>& scores) {
  keys.clear();
  for (std::int64_t j = 0; j < kv.positions; ++j) {
    if (attention_allowed(params, q_position, k_pos[static_cast<std::size_t>(j)]))
      keys.push_back(j);
  }
  scores.assign(keys.size(), T(0));
  const T* qi = q.data() + qv.at(b, i, h, 0);
  const std::int64_t qd = qv.s_dim, kd = kv.s_dim;
  std::size_t n = 0;
  for (; n + 4 <= keys.size(); n += 4) {
    const T* k0 = k.data() + kv.at(b, keys[n], h, 0);
    const T* k1 = k.data() + kv.at(b, keys[n + 1], h, 0);
    const T* k2 = k.data() + kv.at(b, keys[n + 2], h, 0);
    const T* k3 = k.data() + kv.at(b, keys[n + 3], h, 0);
    T a0 = T(0), a1 = T(0), a2 = T(0), a3 = T(0);
    for (std::int64_t d = 0; d < qv.dim; ++d) {
      const T x = qi[d * qd];
      a0 += x * k0[d * kd];
      a1 += x * k1[d * kd];
      a2 += x * k2[d * kd];
      a3 += x * k3[d * kd];
    }
    scores[n] = a0 * scale;
    scores[n + 1] = a1 * scale;
    scores[n + 2] = a2 * scale;
    scores[n + 3] = a3 * scale;
  }
  for (; n < keys.size(); ++n) {
    const T* kj = k.data() + kv.at(b, keys[n], h, 0);
    T dot = T(0);
    for (std::int64_t d = 0; d < qv.dim; ++d) dot += qi[d * qd] * kj[d * kd];
    scores[n] = dot * scale;
  }
}

// The gradients of one query row (b, h, i) given p_n and ds_n over its allowed keys:
//   dq_i = (sum_n ds_n k_n) * scale     (n ascending; written, or added when accumulate_dq)
//   dk_n += (ds_n q_i) * scale,  dv_n += p_n dout_i
// Writing dq (not adding it to a zero) keeps the sign of a zero result.
template <typename T>
void row_gradients(const Tensor<T>& dout, const Tensor<T>& q, const HeadStrides& qv,
                   const Tensor<T>& k, const HeadStrides& kv, std::int64_t b, std::int64_t h,
                   std::int64_t i, const std::vector<std::int64_t>& keys, const std::vector<T>& p,
                   const std::vector<T>& ds, const T& scale, bool accumulate_dq, Tensor<T>& dq,
                   Tensor<T>& dk, Tensor<T>& dv) {
  for (std::int64_t d = 0; d < qv.dim; ++d) {
    T acc = T(0);
    for (std::size_t n = 0; n < keys.size(); ++n) acc += ds[n] * k[kv.at(b, keys[n], h, d)];
    if (accumulate_dq) {
      dq[qv.at(b, i, h, d)] += acc * scale;
    } else {
      dq[qv.at(b, i, h, d)] = acc * scale;
    }
  }
  for (std::size_t n = 0; n < keys.size(); ++n) {
    for (std::int64_t d = 0; d < qv.dim; ++d) {
      const std::int64_t at = kv.at(b, keys[n], h, d);
      dk[at] += (ds[n] * q[qv.at(b, i, h, d)]) * scale;
      dv[at] += p[n] * dout[qv.at(b, i, h, d)];
    }
  }
}

template <typename T>
void check_attention_shapes(const Tensor<T>& q, const std::vector<std::int64_t>& q_pos,
                            const Tensor<T>& k, const Tensor<T>& v,
                            const std::vector<std::int64_t>& k_pos) {
  const Shape& qs = q.shape();
  const Shape& ks = k.shape();
  SHARDSIM_ASSERT(ks == v.shape(), "attention: k and v differ in shape");
  SHARDSIM_ASSERT(qs.extent("batch") == ks.extent("batch") &&
                      qs.extent("head") == ks.extent("head") &&
                      qs.extent("head_dim") == ks.extent("head_dim"),
                  "attention: q and k differ in batch, head or head_dim");
  SHARDSIM_ASSERT(static_cast<std::int64_t>(q_pos.size()) == qs.extent("seq") &&
                      static_cast<std::int64_t>(k_pos.size()) == ks.extent("kv"),
                  "attention: one position per query and per key");
}

}  // namespace detail

template <typename T>
void attention_forward(const Tensor<T>& q, const std::vector<std::int64_t>& q_pos,
                       const Tensor<T>& k, const Tensor<T>& v,
                       const std::vector<std::int64_t>& k_pos, const AttentionParams& params,
                       Tensor<T>& out, AttentionSaved<T>& saved) {
  using std::exp;
  using std::log;
  using std::sqrt;
  detail::check_attention_shapes(q, q_pos, k, v, k_pos);
  const detail::HeadStrides qv(q.shape(), "seq");
  const detail::HeadStrides kv(k.shape(), "kv");
  out = Tensor<T>(q.shape());
  const Shape rows = q.shape().without("head_dim");
  saved.max = Tensor<T>(rows);
  saved.sum = Tensor<T>(rows);
  saved.lse = Tensor<T>(rows);
  const detail::RowStrides rv(rows);
  const T scale = T(1) / sqrt(T(qv.dim));
  std::vector<std::int64_t> keys;
  std::vector<T> e;
  std::vector<T> acc;
  for (std::int64_t b = 0; b < qv.batch; ++b) {
    for (std::int64_t h = 0; h < qv.heads; ++h) {
      for (std::int64_t i = 0; i < qv.positions; ++i) {
        detail::row_scores(q, qv, k, kv, b, h, i, q_pos[static_cast<std::size_t>(i)], k_pos, params,
                           scale, keys, e);
        const std::int64_t row = rv.at(b, i, h);
        if (keys.empty()) {
          saved.max[row] = negative_infinity<T>();
          saved.sum[row] = T(0);
          saved.lse[row] = negative_infinity<T>();
          continue;  // out stays 0
        }
        T m = negative_infinity<T>();
        for (const T& s : e) {
          if (s > m) m = s;
        }
        T l = T(0);
        for (T& s : e) {
          s = exp(s - m);
          l += s;
        }
        // out_d = (sum_n e_n v_nd) / l: every d one accumulator over the keys ascending, all d
        // together so v is read along its rows.
        acc.assign(static_cast<std::size_t>(qv.dim), T(0));
        for (std::size_t n = 0; n < keys.size(); ++n) {
          const T en = e[n];
          const T* vn = v.data() + kv.at(b, keys[n], h, 0);
          for (std::int64_t d = 0; d < qv.dim; ++d) acc[d] += en * vn[d * kv.s_dim];
        }
        for (std::int64_t d = 0; d < qv.dim; ++d) out[qv.at(b, i, h, d)] = acc[d] / l;
        saved.max[row] = m;
        saved.sum[row] = l;
        saved.lse[row] = m + log(l);
      }
    }
  }
}

template <typename T>
void attention_backward(const Tensor<T>& dout, const Tensor<T>& q,
                        const std::vector<std::int64_t>& q_pos, const Tensor<T>& k,
                        const Tensor<T>& v, const std::vector<std::int64_t>& k_pos,
                        const AttentionSaved<T>& saved, const AttentionParams& params,
                        Tensor<T>& dq, Tensor<T>& dk, Tensor<T>& dv) {
  using std::exp;
  using std::sqrt;
  detail::check_attention_shapes(q, q_pos, k, v, k_pos);
  const detail::HeadStrides qv(q.shape(), "seq");
  const detail::HeadStrides kv(k.shape(), "kv");
  const detail::RowStrides rv(saved.sum.shape());
  dq = Tensor<T>(q.shape());
  dk = Tensor<T>(k.shape());
  dv = Tensor<T>(v.shape());
  const T scale = T(1) / sqrt(T(qv.dim));
  std::vector<std::int64_t> keys;
  std::vector<T> p;
  std::vector<T> ds;
  for (std::int64_t b = 0; b < qv.batch; ++b) {
    for (std::int64_t h = 0; h < qv.heads; ++h) {
      for (std::int64_t i = 0; i < qv.positions; ++i) {
        const std::int64_t row = rv.at(b, i, h);
        const T l = saved.sum[row];
        if (!(l > T(0))) continue;  // no allowed key: no gradient
        const T m = saved.max[row];
        detail::row_scores(q, qv, k, kv, b, h, i, q_pos[static_cast<std::size_t>(i)], k_pos, params,
                           scale, keys, p);
        for (T& s : p) s = exp(s - m) / l;
        ds.assign(keys.size(), T(0));
        T total = T(0);  // D = sum_j p_j dp_j
        for (std::size_t n = 0; n < keys.size(); ++n) {
          T dp = T(0);
          for (std::int64_t d = 0; d < qv.dim; ++d) {
            dp += dout[qv.at(b, i, h, d)] * v[kv.at(b, keys[n], h, d)];
          }
          ds[n] = dp;
          total += p[n] * dp;
        }
        for (std::size_t n = 0; n < keys.size(); ++n) ds[n] = p[n] * (ds[n] - total);
        detail::row_gradients(dout, q, qv, k, kv, b, h, i, keys, p, ds, scale, false, dq, dk, dv);
      }
    }
  }
}

template <typename T>
void attention_block_backward(const Tensor<T>& dout, const Tensor<T>& q,
                              const std::vector<std::int64_t>& q_pos, const Tensor<T>& k,
                              const Tensor<T>& v, const std::vector<std::int64_t>& k_pos,
                              const Tensor<T>& out, const Tensor<T>& lse,
                              const AttentionParams& params, Tensor<T>& dq, Tensor<T>& dk,
                              Tensor<T>& dv) {
  using std::exp;
  using std::isinf;
  using std::sqrt;
  detail::check_attention_shapes(q, q_pos, k, v, k_pos);
  SHARDSIM_ASSERT(dq.shape() == q.shape() && dk.shape() == k.shape() && dv.shape() == v.shape(),
                  "attention_block_backward accumulates into buffers shaped like q, k, v");
  const detail::HeadStrides qv(q.shape(), "seq");
  const detail::HeadStrides kv(k.shape(), "kv");
  const detail::RowStrides rv(lse.shape());
  const T scale = T(1) / sqrt(T(qv.dim));
  std::vector<std::int64_t> keys;
  std::vector<T> p;
  std::vector<T> ds;
  for (std::int64_t b = 0; b < qv.batch; ++b) {
    for (std::int64_t h = 0; h < qv.heads; ++h) {
      for (std::int64_t i = 0; i < qv.positions; ++i) {
        const T row_lse = lse[rv.at(b, i, h)];
        if (isinf(row_lse)) continue;  // -inf: no allowed key in any block
        detail::row_scores(q, qv, k, kv, b, h, i, q_pos[static_cast<std::size_t>(i)], k_pos, params,
                           scale, keys, p);
        if (keys.empty()) continue;
        T total = T(0);  // D_i = dout_i . out_i
        for (std::int64_t d = 0; d < qv.dim; ++d) {
          total += dout[qv.at(b, i, h, d)] * out[qv.at(b, i, h, d)];
        }
        ds.assign(keys.size(), T(0));
        for (std::size_t n = 0; n < keys.size(); ++n) {
          p[n] = exp(p[n] - row_lse);
          T dp = T(0);
          for (std::int64_t d = 0; d < qv.dim; ++d) {
            dp += dout[qv.at(b, i, h, d)] * v[kv.at(b, keys[n], h, d)];
          }
          ds[n] = p[n] * (dp - total);
        }
        detail::row_gradients(dout, q, qv, k, kv, b, h, i, keys, p, ds, scale, true, dq, dk, dv);
      }
    }
  }
}

template <typename T>
void attention_merge(Tensor<T>& out, Tensor<T>& lse, const Tensor<T>& block_out,
                     const Tensor<T>& block_lse) {
  using std::exp;
  using std::isinf;
  using std::log;
  SHARDSIM_ASSERT(out.shape() == block_out.shape() && lse.shape() == block_lse.shape(),
                  "attention_merge: partial results differ in shape");
  const detail::HeadStrides ov(out.shape(), "seq");
  const detail::RowStrides rv(lse.shape());
  for (std::int64_t b = 0; b < ov.batch; ++b) {
    for (std::int64_t i = 0; i < ov.positions; ++i) {
      for (std::int64_t h = 0; h < ov.heads; ++h) {
        const std::int64_t row = rv.at(b, i, h);
        const T lb = block_lse[row];
        if (isinf(lb) && lb < T(0)) continue;  // fully masked block: nothing to merge
        const T la = lse[row];
        if (isinf(la) && la < T(0)) {
          for (std::int64_t d = 0; d < ov.dim; ++d) {
            out[ov.at(b, i, h, d)] = block_out[ov.at(b, i, h, d)];
          }
          lse[row] = lb;
          continue;
        }
        const T m = la > lb ? la : lb;
        const T a = exp(la - m);
        const T c = exp(lb - m);
        const T w = a + c;
        for (std::int64_t d = 0; d < ov.dim; ++d) {
          const std::int64_t at = ov.at(b, i, h, d);
          out[at] = (out[at] * a + block_out[at] * c) / w;
        }
        lse[row] = m + log(w);
      }
    }
  }
}

}  // namespace shardsim

// Explicit instantiation list, used by attention.cpp (float, double) and attention_mp.cpp (Mp).
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
