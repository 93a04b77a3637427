// Template bodies of ops/attention/project.hpp.
#pragma once

#include <algorithm>
#include <vector>

#include "shardsim/ops/attention/attention-inl.hpp"
#include "shardsim/ops/attention/project.hpp"

namespace shardsim {

namespace detail {

// `w` gathered into a contiguous matrix: m[(r * n1 + c1) * n2 + c2] = w[r * rs + c1 * s1 + c2 *
// s2], so the forward projections read their weights along contiguous rows.
template <typename T>
std::vector<T> gather_rows(const Tensor<T>& w, std::int64_t rows, std::int64_t rs, std::int64_t n1,
                           std::int64_t s1, std::int64_t n2, std::int64_t s2) {
  std::vector<T> m(static_cast<std::size_t>(rows * n1 * n2));
  std::size_t at = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c1 = 0; c1 < n1; ++c1) {
      for (std::int64_t c2 = 0; c2 < n2; ++c2) m[at++] = w[r * rs + c1 * s1 + c2 * s2];
    }
  }
  return m;
}

}  // namespace detail

template <typename T>
void project_heads(const Tensor<T>& x, const Tensor<T>& w, Tensor<T>& y) {
  const Shape& xs = x.shape();
  const Shape& ws = w.shape();
  const std::int64_t batch = xs.extent("batch"), seq = xs.extent("seq");
  const std::int64_t hidden = xs.extent("hidden");
  SHARDSIM_ASSERT(ws.extent("hidden") == hidden, "project_heads: hidden extents differ");
  y = Tensor<T>(head_shape(batch, "seq", seq, ws.extent("head"), ws.extent("head_dim")));
  const detail::HeadStrides yv(y.shape(), "seq");
  const std::int64_t xb = stride_of(xs, "batch"), xsq = stride_of(xs, "seq"),
                     xc = stride_of(xs, "hidden");
  const std::int64_t n = yv.heads * yv.dim;
  // One row (b, s) at a time, all its outputs together: output (h, d) is still one accumulator
  // summed over c ascending, but w is read along contiguous rows and the (h, d) lanes are
  // independent, so the loop vectorizes without changing any sum's order.
  const std::vector<T> wm =
      detail::gather_rows(w, hidden, stride_of(ws, "hidden"), yv.heads, stride_of(ws, "head"),
                          yv.dim, stride_of(ws, "head_dim"));
  std::vector<T> acc(static_cast<std::size_t>(n));
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t s = 0; s < seq; ++s) {
      std::fill(acc.begin(), acc.end(), T(0));
      for (std::int64_t c = 0; c < hidden; ++c) {
        const T xv = x[b * xb + s * xsq + c * xc];
        const T* row = wm.data() + c * n;
        for (std::int64_t j = 0; j < n; ++j) acc[j] += xv * row[j];
      }
      for (std::int64_t h = 0; h < yv.heads; ++h) {
        for (std::int64_t d = 0; d < yv.dim; ++d) y[yv.at(b, s, h, d)] = acc[h * yv.dim + d];
      }
    }
  }
}

template <typename T>
void project_heads_backward(const Tensor<T>& dy, const Tensor<T>& x, const Tensor<T>& w,
                            Tensor<T>& dx, Tensor<T>& dw) {
  const Shape& xs = x.shape();
  const Shape& ws = w.shape();
  const detail::HeadStrides yv(dy.shape(), "seq");
  const std::int64_t hidden = xs.extent("hidden");
  const std::int64_t xb = stride_of(xs, "batch"), xsq = stride_of(xs, "seq"),
                     xc = stride_of(xs, "hidden");
  const std::int64_t wc = stride_of(ws, "hidden"), wh = stride_of(ws, "head"),
                     wd = stride_of(ws, "head_dim");
  SHARDSIM_ASSERT(dw.shape() == ws, "project_heads_backward: dw must be shaped like w");
  dx = Tensor<T>(xs);
  for (std::int64_t b = 0; b < yv.batch; ++b) {
    for (std::int64_t s = 0; s < yv.positions; ++s) {
      for (std::int64_t c = 0; c < hidden; ++c) {
        T acc = T(0);
        for (std::int64_t h = 0; h < yv.heads; ++h) {
          for (std::int64_t d = 0; d < yv.dim; ++d) {
            acc += dy[yv.at(b, s, h, d)] * w[c * wc + h * wh + d * wd];
          }
        }
        dx[b * xb + s * xsq + c * xc] = acc;
      }
    }
  }
  for (std::int64_t c = 0; c < hidden; ++c) {
    for (std::int64_t h = 0; h < yv.heads; ++h) {
      for (std::int64_t d = 0; d < yv.dim; ++d) {
        T acc = T(0);
        for (std::int64_t b = 0; b < yv.batch; ++b) {
          for (std::int64_t s = 0; s < yv.positions; ++s) {
            acc += x[b * xb + s * xsq + c * xc] * dy[yv.at(b, s, h, d)];
          }
        }
        dw[c * wc + h * wh + d * wd] += acc;
      }
    }
  }
}

template <typename T>
void project_out(const Tensor<T>& attn, const Tensor<T>& wo, Tensor<T>& y) {
  const detail::HeadStrides av(attn.shape(), "seq");
  const Shape& ws = wo.shape();
  const std::int64_t hidden = ws.extent("hidden");
  y = Tensor<T>(Shape({{"batch", av.batch}, {"seq", av.positions}, {"hidden", hidden}}));
  const Shape& ys = y.shape();
  const std::int64_t yb = stride_of(ys, "batch"), ysq = stride_of(ys, "seq"),
                     yc = stride_of(ys, "hidden");
  // As in project_heads: one row at a time, every output c one accumulator over (h, d)
  // ascending, wo read as contiguous (h, d) rows.
  const std::vector<T> wm =
      detail::gather_rows(wo, av.heads, stride_of(ws, "head"), av.dim, stride_of(ws, "head_dim"),
                          hidden, stride_of(ws, "hidden"));
  std::vector<T> acc(static_cast<std::size_t>(hidden));
  for (std::int64_t b = 0; b < av.batch; ++b) {
    for (std::int64_t s = 0; s < av.positions; ++s) {
      std::fill(acc.begin(), acc.end(), T(0));
      for (std::int64_t h = 0; h < av.heads; ++h) {
        for (std::int64_t d = 0; d < av.dim; ++d) {
          const T a = attn[av.at(b, s, h, d)];
          const T* row = wm.data() + (h * av.dim + d) * hidden;
          for (std::int64_t c = 0; c < hidden; ++c) acc[c] += a * row[c];
        }
      }
      for (std::int64_t c = 0; c < hidden; ++c) y[b * yb + s * ysq + c * yc] = acc[c];
    }
  }
}

template <typename T>
void project_out_backward(const Tensor<T>& dy, const Tensor<T>& attn, const Tensor<T>& wo,
                          Tensor<T>& dattn, Tensor<T>& dwo) {
  const detail::HeadStrides av(attn.shape(), "seq");
  const Shape& ws = wo.shape();
  const Shape& ys = dy.shape();
  const std::int64_t hidden = ws.extent("hidden");
  const std::int64_t yb = stride_of(ys, "batch"), ysq = stride_of(ys, "seq"),
                     yc = stride_of(ys, "hidden");
  const std::int64_t wh = stride_of(ws, "head"), wd = stride_of(ws, "head_dim"),
                     wc = stride_of(ws, "hidden");
  SHARDSIM_ASSERT(dwo.shape() == ws, "project_out_backward: dwo must be shaped like wo");
  dattn = Tensor<T>(attn.shape());
  for (std::int64_t b = 0; b < av.batch; ++b) {
    for (std::int64_t s = 0; s < av.positions; ++s) {
      for (std::int64_t h = 0; h < av.heads; ++h) {
        for (std::int64_t d = 0; d < av.dim; ++d) {
          T acc = T(0);
          for (std::int64_t c = 0; c < hidden; ++c) {
            acc += dy[b * yb + s * ysq + c * yc] * wo[h * wh + d * wd + c * wc];
          }
          dattn[av.at(b, s, h, d)] = acc;
        }
      }
    }
  }
  for (std::int64_t h = 0; h < av.heads; ++h) {
    for (std::int64_t d = 0; d < av.dim; ++d) {
      for (std::int64_t c = 0; c < hidden; ++c) {
        T acc = T(0);
        for (std::int64_t b = 0; b < av.batch; ++b) {
          for (std::int64_t s = 0; s < av.positions; ++s) {
            acc += attn[av.at(b, s, h, d)] * dy[b * yb + s * ysq + c * yc];
          }
        }
        dwo[h * wh + d * wd + c * wc] += acc;
      }
    }
  }
}

}  // namespace shardsim

// Explicit instantiation list, used by attention/project.cpp and attention/project_mp.cpp.
#define SHARDSIM_INSTANTIATE_ATTENTION_PROJECT(T)                                            \
  template void project_heads(const Tensor<T>&, const Tensor<T>&, Tensor<T>&);               \
  template void project_heads_backward(const Tensor<T>&, const Tensor<T>&, const Tensor<T>&, \
                                       Tensor<T>&, Tensor<T>&);                              \
  template void project_out(const Tensor<T>&, const Tensor<T>&, Tensor<T>&);                 \
  template void project_out_backward(const Tensor<T>&, const Tensor<T>&, const Tensor<T>&,   \
                                     Tensor<T>&, Tensor<T>&);
