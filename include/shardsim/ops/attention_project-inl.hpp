// Template bodies of ops/attention_project.hpp.
#pragma once

#include "shardsim/ops/attention-inl.hpp"
#include "shardsim/ops/attention_project.hpp"

namespace shardsim {

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
  const std::int64_t wc = stride_of(ws, "hidden"), wh = stride_of(ws, "head"),
                     wd = stride_of(ws, "head_dim");
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t s = 0; s < seq; ++s) {
      for (std::int64_t h = 0; h < yv.heads; ++h) {
        for (std::int64_t d = 0; d < yv.dim; ++d) {
          T acc = T(0);
          for (std::int64_t c = 0; c < hidden; ++c) {
            acc += x[b * xb + s * xsq + c * xc] * w[c * wc + h * wh + d * wd];
          }
          y[yv.at(b, s, h, d)] = acc;
        }
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
  const std::int64_t wh = stride_of(ws, "head"), wd = stride_of(ws, "head_dim"),
                     wc = stride_of(ws, "hidden");
  for (std::int64_t b = 0; b < av.batch; ++b) {
    for (std::int64_t s = 0; s < av.positions; ++s) {
      for (std::int64_t c = 0; c < hidden; ++c) {
        T acc = T(0);
        for (std::int64_t h = 0; h < av.heads; ++h) {
          for (std::int64_t d = 0; d < av.dim; ++d) {
            acc += attn[av.at(b, s, h, d)] * wo[h * wh + d * wd + c * wc];
          }
        }
        y[b * yb + s * ysq + c * yc] = acc;
      }
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

// Explicit instantiation list, used by attention_project.cpp and attention_project_mp.cpp.
#define SHARDSIM_INSTANTIATE_ATTENTION_PROJECT(T)                                            \
  template void project_heads(const Tensor<T>&, const Tensor<T>&, Tensor<T>&);               \
  template void project_heads_backward(const Tensor<T>&, const Tensor<T>&, const Tensor<T>&, \
                                       Tensor<T>&, Tensor<T>&);                              \
  template void project_out(const Tensor<T>&, const Tensor<T>&, Tensor<T>&);                 \
  template void project_out_backward(const Tensor<T>&, const Tensor<T>&, const Tensor<T>&,   \
                                     Tensor<T>&, Tensor<T>&);
