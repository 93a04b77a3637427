// Template bodies of ops/attention/project.hpp.
#pragma once

#include <algorithm>
#include <vector>

#include "ops/attention/attention-inl.hpp"
#include "ops/attention/project.hpp"
#include "ops/dot_sum.hpp"
#include "core/parallel.hpp"

namespace shardsim {

namespace detail {

// The 3-axis tensor `w` gathered into a contiguous (rows, n1, n2) matrix:
//   packed[(r * n1 + c1) * n2 + c2] = w[r * row_stride + c1 * stride1 + c2 * stride2],
// so the forward projections read their weights along contiguous rows.
template <typename T>
std::vector<T> gather_rows(const Tensor<T>& w, std::int64_t rows, std::int64_t row_stride,
                           std::int64_t n1, std::int64_t stride1, std::int64_t n2,
                           std::int64_t stride2) {
  std::vector<T> packed(static_cast<std::size_t>(rows * n1 * n2));
  std::size_t at = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c1 = 0; c1 < n1; ++c1) {
      for (std::int64_t c2 = 0; c2 < n2; ++c2) {
        packed[at++] = w[r * row_stride + c1 * stride1 + c2 * stride2];
      }
    }
  }
  return packed;
}

// Row-major strides of a (batch, seq, hidden) tensor, found by axis name.
struct HiddenStrides {
  std::int64_t batch = 0, seq = 0, hidden = 0;

  explicit HiddenStrides(const Shape& shape)
      : batch(stride_of(shape, "batch")),
        seq(stride_of(shape, "seq")),
        hidden(stride_of(shape, "hidden")) {}
  // The flat index of element (b, s, c).
  std::int64_t at(std::int64_t b, std::int64_t s, std::int64_t c) const {
    return b * batch + s * seq + c * hidden;
  }
};

// Row-major strides of a weight with axes hidden, head and head_dim in any order.
struct WeightStrides {
  std::int64_t hidden = 0, head = 0, dim = 0;

  explicit WeightStrides(const Shape& shape)
      : hidden(stride_of(shape, "hidden")),
        head(stride_of(shape, "head")),
        dim(stride_of(shape, "head_dim")) {}
  // The flat index of element (c, h, d).
  std::int64_t at(std::int64_t c, std::int64_t h, std::int64_t d) const {
    return c * hidden + h * head + d * dim;
  }
};

// Runs f(begin, end) over [0, n) in chunks of kRowsPerChunk, the chunks concurrently
// (parallel.hpp). Every output of a projection is one accumulator written by one index, so the
// split changes no sum: a chunk makes its scratch values once (at mp, one allocation per value
// per chunk, not per multiply-add).
inline constexpr std::int64_t kRowsPerChunk = 8;
template <typename F>
void for_each_chunk(std::int64_t n, F f) {
  parallel_for((n + kRowsPerChunk - 1) / kRowsPerChunk, [&](std::int64_t chunk) {
    f(chunk * kRowsPerChunk, std::min(n, (chunk + 1) * kRowsPerChunk));
  });
}

}  // namespace detail

template <typename T>
void project_heads(const Tensor<T>& x, const Tensor<T>& w, Tensor<T>& y) {
  const Shape& x_shape = x.shape();
  const Shape& w_shape = w.shape();
  const std::int64_t batch = x_shape.extent("batch"), seq = x_shape.extent("seq");
  const std::int64_t hidden = x_shape.extent("hidden");
  SHARDSIM_ASSERT(w_shape.extent("hidden") == hidden, "project_heads: hidden extents differ");
  y = Tensor<T>(head_shape(batch, "seq", seq, w_shape.extent("head"), w_shape.extent("head_dim")));
  const detail::HeadStrides y_layout(y.shape(), "seq");
  const detail::HiddenStrides x_layout(x_shape);
  const std::int64_t outputs = y_layout.heads * y_layout.dim;  // per row: (h, d) flattened
  if constexpr (kIsExpansion<T>) {
    // dd/qd: exact dot products rounded once (exact_products, dot_sum.hpp).
    const detail::WeightStrides w_layout(w_shape);
    detail::exact_products<T>(
        batch * seq, outputs, hidden,
        [&](std::int64_t row, std::int64_t c) -> const T& {
          return x[x_layout.at(row / seq, row % seq, c)];
        },
        [&](std::int64_t j, std::int64_t c) -> const T& {  // output j = (h, d)
          return w[w_layout.at(c, j / y_layout.dim, j % y_layout.dim)];
        },
        [&](std::int64_t row, std::int64_t j, detail::DotSum<T>& sum) {
          y[y_layout.at(row / seq, row % seq, j / y_layout.dim, j % y_layout.dim)] = sum.value();
        });
    return;
  }
  // One row (b, s) at a time, all its outputs together: output (h, d) is still one accumulator
  // summed over c ascending, but w is read along contiguous rows and the (h, d) lanes are
  // independent, so the loop vectorizes without changing any sum's order.
  const std::vector<T> w_rows =  // (hidden, head * head_dim)
      detail::gather_rows(w, hidden, stride_of(w_shape, "hidden"), y_layout.heads,
                          stride_of(w_shape, "head"), y_layout.dim, stride_of(w_shape, "head_dim"));
  // Rows (b, s) in chunks, concurrently (detail::for_each_chunk).
  detail::for_each_chunk(batch * seq, [&](std::int64_t first, std::int64_t last) {
    std::vector<T> sums(static_cast<std::size_t>(outputs));  // (head * head_dim)
    T product = T(0);  // in place (scalar.hpp): no Mp temporary per element
    for (std::int64_t row = first; row < last; ++row) {
      const std::int64_t b = row / seq, s = row % seq;
      for (T& sum : sums) sum = 0;
      for (std::int64_t c = 0; c < hidden; ++c) {
        const T x_c = x[x_layout.at(b, s, c)];  // a copy: stores into sums cannot alias it
        const T* w_row = w_rows.data() + c * outputs;
        for (std::int64_t j = 0; j < outputs; ++j) {
          mul_into(product, x_c, w_row[j]);
          add_into(sums[j], sums[j], product);
        }
      }
      for (std::int64_t h = 0; h < y_layout.heads; ++h) {
        for (std::int64_t d = 0; d < y_layout.dim; ++d) {
          y[y_layout.at(b, s, h, d)] = sums[h * y_layout.dim + d];
        }
      }
    }
  });
}

template <typename T>
void project_heads_backward(const Tensor<T>& dy, const Tensor<T>& x, const Tensor<T>& w,
                            Tensor<T>& dx, Tensor<T>& dw) {
  const Shape& x_shape = x.shape();
  const detail::HeadStrides y_layout(dy.shape(), "seq");
  const std::int64_t hidden = x_shape.extent("hidden");
  const detail::HiddenStrides x_layout(x_shape);
  const detail::WeightStrides w_layout(w.shape());
  SHARDSIM_ASSERT(dw.shape() == w.shape(), "project_heads_backward: dw must be shaped like w");
  dx = Tensor<T>(x_shape);
  // dx by rows (b, s), then dw by input features c, each in chunks, concurrently.
  const std::int64_t positions = y_layout.positions;
  if constexpr (kIsExpansion<T>) {  // dd/qd: exact dots rounded once (dot_sum.hpp)
    const std::int64_t dim = y_layout.dim;
    const auto dy_at = [&](std::int64_t row, std::int64_t hd) -> const T& {
      return dy[y_layout.at(row / positions, row % positions, hd / dim, hd % dim)];
    };
    detail::exact_products<T>(
        y_layout.batch * positions, hidden, y_layout.heads * dim, dy_at,
        [&](std::int64_t c, std::int64_t hd) -> const T& {
          return w[w_layout.at(c, hd / dim, hd % dim)];
        },
        [&](std::int64_t row, std::int64_t c, detail::DotSum<T>& sum) {
          dx[x_layout.at(row / positions, row % positions, c)] = sum.value();
        });
    detail::exact_products<T>(
        hidden, y_layout.heads * dim, y_layout.batch * positions,
        [&](std::int64_t c, std::int64_t row) -> const T& {
          return x[x_layout.at(row / positions, row % positions, c)];
        },
        [&](std::int64_t hd, std::int64_t row) -> const T& { return dy_at(row, hd); },
        [&](std::int64_t c, std::int64_t hd, detail::DotSum<T>& sum) {
          T& dw_chd = dw[w_layout.at(c, hd / dim, hd % dim)];
          add_into(dw_chd, dw_chd, sum.value());
        });
    return;
  }
  detail::for_each_chunk(y_layout.batch * positions, [&](std::int64_t first, std::int64_t last) {
    detail::DotSum<T> sum;  // in place (scalar.hpp): no Mp temporary per element
    for (std::int64_t row = first; row < last; ++row) {
      const std::int64_t b = row / positions, s = row % positions;
      for (std::int64_t c = 0; c < hidden; ++c) {
        sum.clear();
        for (std::int64_t h = 0; h < y_layout.heads; ++h) {
          for (std::int64_t d = 0; d < y_layout.dim; ++d) {
            sum.add(dy[y_layout.at(b, s, h, d)], w[w_layout.at(c, h, d)]);
          }
        }
        dx[x_layout.at(b, s, c)] = sum.value();
      }
    }
  });
  detail::for_each_chunk(hidden, [&](std::int64_t first, std::int64_t last) {
    detail::DotSum<T> sum;
    for (std::int64_t c = first; c < last; ++c) {
      for (std::int64_t h = 0; h < y_layout.heads; ++h) {
        for (std::int64_t d = 0; d < y_layout.dim; ++d) {
          sum.clear();
          for (std::int64_t b = 0; b < y_layout.batch; ++b) {
            for (std::int64_t s = 0; s < positions; ++s) {
              sum.add(x[x_layout.at(b, s, c)], dy[y_layout.at(b, s, h, d)]);
            }
          }
          T& dw_chd = dw[w_layout.at(c, h, d)];
          add_into(dw_chd, dw_chd, sum.value());
        }
      }
    }
  });
}

template <typename T>
void project_out(const Tensor<T>& attn, const Tensor<T>& wo, Tensor<T>& y) {
  const detail::HeadStrides attn_layout(attn.shape(), "seq");
  const Shape& w_shape = wo.shape();
  const std::int64_t hidden = w_shape.extent("hidden");
  y = Tensor<T>(
      Shape({{"batch", attn_layout.batch}, {"seq", attn_layout.positions}, {"hidden", hidden}}));
  const detail::HiddenStrides y_layout(y.shape());
  const std::int64_t positions = attn_layout.positions;
  if constexpr (kIsExpansion<T>) {  // dd/qd: exact dots rounded once, as in project_heads
    const detail::WeightStrides w_layout(w_shape);
    const std::int64_t dim = attn_layout.dim;
    detail::exact_products<T>(
        attn_layout.batch * positions, hidden, attn_layout.heads * dim,
        [&](std::int64_t row, std::int64_t hd) -> const T& {
          return attn[attn_layout.at(row / positions, row % positions, hd / dim, hd % dim)];
        },
        [&](std::int64_t c, std::int64_t hd) -> const T& {
          return wo[w_layout.at(c, hd / dim, hd % dim)];
        },
        [&](std::int64_t row, std::int64_t c, detail::DotSum<T>& sum) {
          y[y_layout.at(row / positions, row % positions, c)] = sum.value();
        });
    return;
  }
  // As in project_heads: one row at a time, every output c one accumulator over (h, d)
  // ascending, wo read as contiguous (h, d) rows.
  const std::vector<T> w_rows =  // (head * head_dim, hidden)
      detail::gather_rows(wo, attn_layout.heads, stride_of(w_shape, "head"), attn_layout.dim,
                          stride_of(w_shape, "head_dim"), hidden, stride_of(w_shape, "hidden"));
  detail::for_each_chunk(attn_layout.batch * positions, [&](std::int64_t first, std::int64_t last) {
    std::vector<T> sums(static_cast<std::size_t>(hidden));  // (hidden)
    T product = T(0);  // in place (scalar.hpp): no Mp temporary per element
    for (std::int64_t row = first; row < last; ++row) {
      const std::int64_t b = row / positions, s = row % positions;
      for (T& sum : sums) sum = 0;
      for (std::int64_t h = 0; h < attn_layout.heads; ++h) {
        for (std::int64_t d = 0; d < attn_layout.dim; ++d) {
          const T attn_hd = attn[attn_layout.at(b, s, h, d)];  // a copy, as x_c above
          const T* w_row = w_rows.data() + (h * attn_layout.dim + d) * hidden;
          for (std::int64_t c = 0; c < hidden; ++c) {
            mul_into(product, attn_hd, w_row[c]);
            add_into(sums[c], sums[c], product);
          }
        }
      }
      for (std::int64_t c = 0; c < hidden; ++c) y[y_layout.at(b, s, c)] = sums[c];
    }
  });
}

template <typename T>
void project_out_backward(const Tensor<T>& dy, const Tensor<T>& attn, const Tensor<T>& wo,
                          Tensor<T>& dattn, Tensor<T>& dwo) {
  const detail::HeadStrides attn_layout(attn.shape(), "seq");
  const std::int64_t hidden = wo.shape().extent("hidden");
  const detail::HiddenStrides y_layout(dy.shape());
  const detail::WeightStrides w_layout(wo.shape());
  SHARDSIM_ASSERT(dwo.shape() == wo.shape(), "project_out_backward: dwo must be shaped like wo");
  dattn = Tensor<T>(attn.shape());
  // dattn by rows (b, s), then dwo by (h, d), each in chunks, concurrently.
  const std::int64_t positions = attn_layout.positions;
  if constexpr (kIsExpansion<T>) {  // dd/qd: exact dots rounded once (dot_sum.hpp)
    const std::int64_t dim = attn_layout.dim;
    const auto dy_at = [&](std::int64_t row, std::int64_t c) -> const T& {
      return dy[y_layout.at(row / positions, row % positions, c)];
    };
    detail::exact_products<T>(
        attn_layout.batch * positions, attn_layout.heads * dim, hidden, dy_at,
        [&](std::int64_t hd, std::int64_t c) -> const T& {
          return wo[w_layout.at(c, hd / dim, hd % dim)];
        },
        [&](std::int64_t row, std::int64_t hd, detail::DotSum<T>& sum) {
          dattn[attn_layout.at(row / positions, row % positions, hd / dim, hd % dim)] = sum.value();
        });
    detail::exact_products<T>(
        attn_layout.heads * dim, hidden, attn_layout.batch * positions,
        [&](std::int64_t hd, std::int64_t row) -> const T& {
          return attn[attn_layout.at(row / positions, row % positions, hd / dim, hd % dim)];
        },
        [&](std::int64_t c, std::int64_t row) -> const T& { return dy_at(row, c); },
        [&](std::int64_t hd, std::int64_t c, detail::DotSum<T>& sum) {
          T& dwo_chd = dwo[w_layout.at(c, hd / dim, hd % dim)];
          add_into(dwo_chd, dwo_chd, sum.value());
        });
    return;
  }
  detail::for_each_chunk(attn_layout.batch * positions, [&](std::int64_t first, std::int64_t last) {
    detail::DotSum<T> sum;  // in place (scalar.hpp): no Mp temporary per element
    for (std::int64_t row = first; row < last; ++row) {
      const std::int64_t b = row / positions, s = row % positions;
      for (std::int64_t h = 0; h < attn_layout.heads; ++h) {
        for (std::int64_t d = 0; d < attn_layout.dim; ++d) {
          sum.clear();
          for (std::int64_t c = 0; c < hidden; ++c) {
            sum.add(dy[y_layout.at(b, s, c)], wo[w_layout.at(c, h, d)]);
          }
          dattn[attn_layout.at(b, s, h, d)] = sum.value();
        }
      }
    }
  });
  detail::for_each_chunk(
      attn_layout.heads * attn_layout.dim, [&](std::int64_t first, std::int64_t last) {
        detail::DotSum<T> sum;
        for (std::int64_t hd = first; hd < last; ++hd) {
          const std::int64_t h = hd / attn_layout.dim, d = hd % attn_layout.dim;
          for (std::int64_t c = 0; c < hidden; ++c) {
            sum.clear();
            for (std::int64_t b = 0; b < attn_layout.batch; ++b) {
              for (std::int64_t s = 0; s < positions; ++s) {
                sum.add(attn[attn_layout.at(b, s, h, d)], dy[y_layout.at(b, s, c)]);
              }
            }
            T& dwo_chd = dwo[w_layout.at(c, h, d)];
            add_into(dwo_chd, dwo_chd, sum.value());
          }
        }
      });
}

}  // namespace shardsim

// Explicit instantiation list: the op's .cpp instantiates float and double, and CMakeLists.txt
// finds this macro and generates the Mp, NarrowFloat, Dd and Qd units.
#define SHARDSIM_INSTANTIATE_ATTENTION_PROJECT(T)                                            \
  template void project_heads(const Tensor<T>&, const Tensor<T>&, Tensor<T>&);               \
  template void project_heads_backward(const Tensor<T>&, const Tensor<T>&, const Tensor<T>&, \
                                       Tensor<T>&, Tensor<T>&);                              \
  template void project_out(const Tensor<T>&, const Tensor<T>&, Tensor<T>&);                 \
  template void project_out_backward(const Tensor<T>&, const Tensor<T>&, const Tensor<T>&,   \
                                     Tensor<T>&, Tensor<T>&);
