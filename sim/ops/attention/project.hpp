// The q/k/v and output projections of sliding-window attention, per-rank kernels and dense oracle.
//
// Layouts (named axes; index arithmetic goes through stride_of):
//   x, y           (batch, seq, hidden)
//   q, k, v, attn  (batch, seq, head, head_dim)
//   wq, wk, wv     (hidden, head, head_dim)
//   wo             (head, head_dim, hidden)
// Every sum is one accumulator in the stated order, started at 0.
#pragma once

#include "ops/attention/attention.hpp"

namespace shardsim {

// Input projection: y[b,s,h,d] = sum_c x[b,s,c] * w[c,h,d], c ascending.
// x: (batch, seq, hidden), w: (hidden, head, head_dim) -> y: (batch, seq, head, head_dim).
template <typename T>
void project_heads(const Tensor<T>& x, const Tensor<T>& w, Tensor<T>& y);
// dx[b,s,c] = sum_{h,d} dy[b,s,h,d] * w[c,h,d] (h, then d ascending): written.
// dw[c,h,d] += sum_{b,s} x[b,s,c] * dy[b,s,h,d] (b, then s ascending): accumulated.
template <typename T>
void project_heads_backward(const Tensor<T>& dy, const Tensor<T>& x, const Tensor<T>& w,
                            Tensor<T>& dx, Tensor<T>& dw);

// Output projection: y[b,s,c] = sum_{h,d} attn[b,s,h,d] * wo[h,d,c] (h, then d ascending).
// attn: (batch, seq, head, head_dim), wo: (head, head_dim, hidden) -> y: (batch, seq, hidden).
template <typename T>
void project_out(const Tensor<T>& attn, const Tensor<T>& wo, Tensor<T>& y);
// dattn[b,s,h,d] = sum_c dy[b,s,c] * wo[h,d,c] (c ascending): written.
// dwo[h,d,c] += sum_{b,s} attn[b,s,h,d] * dy[b,s,c] (b, then s ascending): accumulated.
template <typename T>
void project_out_backward(const Tensor<T>& dy, const Tensor<T>& attn, const Tensor<T>& wo,
                          Tensor<T>& dattn, Tensor<T>& dwo);

}  // namespace shardsim
