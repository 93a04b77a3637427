// Template bodies of ops/rope.hpp.
#pragma once

#include <cmath>

#include "shardsim/ops/rope.hpp"
#include "shardsim/shape.hpp"

namespace shardsim {

namespace detail {

// Visits every (token, plane) of x: rotate(at_a, at_b, c, s) with the flat indices of the pair
// and the rotation's cosine and sine for that token's position.
template <typename T, typename Rotate>
void for_each_rope_pair(const Shape& shape, const std::vector<std::int64_t>& positions,
                        const RopeParams& params, Rotate rotate) {
  using std::cos;
  using std::pow;
  using std::sin;
  const AxisView pos = AxisView::of(shape, params.pos_axis);
  const AxisView dim = AxisView::of(shape, params.dim_axis);
  SHARDSIM_ASSERT(static_cast<std::int64_t>(positions.size()) == pos.extent,
                  "rope needs one position per index of the position axis");
  SHARDSIM_ASSERT(dim.extent % 2 == 0, "rope needs an even head_dim");
  SHARDSIM_ASSERT(dim.inner <= pos.inner, "rope needs head_dim inside the position axis");
  const std::int64_t planes = dim.extent / 2;
  // inv_freq_i = theta^(-2i / D), once per plane.
  std::vector<T> inv_freq;
  for (std::int64_t i = 0; i < planes; ++i) {
    inv_freq.push_back(pow(T(params.theta), T(-2 * i) / T(dim.extent)));
  }
  // pos.inner = (the axes inside pos) = (head, head_dim) in some order: one vector per value of
  // the axes other than head_dim, at stride dim.inner.
  for (std::int64_t o = 0; o < pos.outer; ++o) {
    for (std::int64_t p = 0; p < pos.extent; ++p) {
      const T position = T(positions[static_cast<std::size_t>(p)]);
      const std::int64_t row = pos.flat(o, p, 0);
      std::vector<T> cosines;
      std::vector<T> sines;
      for (std::int64_t i = 0; i < planes; ++i) {
        const T angle = position * inv_freq[static_cast<std::size_t>(i)];
        cosines.push_back(cos(angle));
        sines.push_back(sin(angle));
      }
      for (std::int64_t j = 0; j < pos.inner; ++j) {
        // j enumerates the inner elements; the ones at head_dim index 0 start a vector.
        if ((j / dim.inner) % dim.extent != 0) continue;
        for (std::int64_t i = 0; i < planes; ++i) {
          const RopePair pair = rope_pair(params.convention, dim.extent, i);
          rotate(row + j + pair.a * dim.inner, row + j + pair.b * dim.inner,
                 cosines[static_cast<std::size_t>(i)], sines[static_cast<std::size_t>(i)]);
        }
      }
    }
  }
}

}  // namespace detail

template <typename T>
void rope_forward(const Tensor<T>& x, const std::vector<std::int64_t>& positions,
                  const RopeParams& params, Tensor<T>& y) {
  y = Tensor<T>(x.shape());
  detail::for_each_rope_pair<T>(x.shape(), positions, params,
                                [&](std::int64_t a, std::int64_t b, const T& c, const T& s) {
                                  y[a] = x[a] * c - x[b] * s;
                                  y[b] = x[b] * c + x[a] * s;
                                });
}

template <typename T>
void rope_backward(const Tensor<T>& dy, const std::vector<std::int64_t>& positions,
                   const RopeParams& params, Tensor<T>& dx) {
  dx = Tensor<T>(dy.shape());
  detail::for_each_rope_pair<T>(dy.shape(), positions, params,
                                [&](std::int64_t a, std::int64_t b, const T& c, const T& s) {
                                  dx[a] = dy[a] * c + dy[b] * s;
                                  dx[b] = dy[b] * c - dy[a] * s;
                                });
}

}  // namespace shardsim

// Explicit instantiation list, used by rope.cpp (float, double) and rope_mp.cpp (Mp).
#define SHARDSIM_INSTANTIATE_ROPE(T)                                              \
  template void rope_forward(const Tensor<T>&, const std::vector<std::int64_t>&,  \
                             const RopeParams&, Tensor<T>&);                      \
  template void rope_backward(const Tensor<T>&, const std::vector<std::int64_t>&, \
                              const RopeParams&, Tensor<T>&);
