// Template bodies of ops/rope.hpp.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "core/parallel.hpp"
#include "core/scalar.hpp"
#include "core/shape.hpp"
#include "ops/attention/rope.hpp"

namespace shardsim {

namespace detail {

// The cosines and sines of one position's angles, one per plane.
template <typename T>
struct RopeAngles {
  std::vector<T> cosines, sines;
};

// cos(position inv_freq_i) and sin(position inv_freq_i) for every plane i. At dd/qd, where QD's
// sin and cos take microseconds each, every thread keeps the angles it has computed, by theta,
// head_dim and position: the attention plans rotate q and k at the same positions, and the oracle
// and the ranks rotate the same positions again. A kept entry holds the values cos() and sin()
// returned for those arguments, so no value depends on the cache. Other types compute them into
// `scratch` each time (cheap at f32/f64; mp values live in one precision, set per run).
template <typename T>
const RopeAngles<T>& rope_angles(const std::vector<T>& inv_freq, double theta,
                                 std::int64_t head_dim, std::int64_t position,
                                 RopeAngles<T>& scratch) {
  using std::cos;
  using std::sin;
  const auto compute = [&](RopeAngles<T>& out) {
    out.cosines.clear();
    out.sines.clear();
    const T at = T(position);
    for (const T& freq : inv_freq) {
      const T angle = at * freq;
      out.cosines.push_back(cos(angle));
      out.sines.push_back(sin(angle));
    }
  };
  if constexpr (kIsExpansion<T>) {
    thread_local std::map<std::tuple<std::uint64_t, std::int64_t, std::int64_t>, RopeAngles<T>>
        kept;
    const auto [entry, fresh] =
        kept.try_emplace({std::bit_cast<std::uint64_t>(theta), head_dim, position});
    if (fresh) compute(entry->second);
    return entry->second;
  } else {
    compute(scratch);
    return scratch;
  }
}

// Visits every (token, plane) of x: rotate(at_a, at_b, cosine, sine) with the flat indices of
// the plane's pair and the rotation's cosine and sine for that token's position.
template <typename T, typename Rotate>
void for_each_rope_pair(const Shape& shape, const std::vector<std::int64_t>& positions,
                        const RopeParams& params, Rotate rotate) {
  using std::pow;
  const AxisView pos = AxisView::of(shape, params.pos_axis);  // outer x positions x inner
  const AxisView dim = AxisView::of(shape, params.dim_axis);  // dim.inner: stride of head_dim
  SHARDSIM_ASSERT(static_cast<std::int64_t>(positions.size()) == pos.extent,
                  "rope needs one position per index of the position axis");
  SHARDSIM_ASSERT(dim.extent % 2 == 0, "rope needs an even head_dim");
  SHARDSIM_ASSERT(dim.inner <= pos.inner, "rope needs head_dim inside the position axis");
  const std::int64_t planes = dim.extent / 2;
  // inv_freq_i = theta^(-2i / D), once per plane.
  std::vector<T> inv_freq;  // (planes)
  for (std::int64_t i = 0; i < planes; ++i) {
    inv_freq.push_back(pow(T(params.theta), T(-2 * i) / T(dim.extent)));
  }
  // pos.inner = (the axes inside pos) = (head, head_dim) in some order: one vector per value of
  // the axes other than head_dim, at stride dim.inner. The (outer, position) rows in chunks of
  // kRowChunk, concurrently (parallel.hpp): a row's cosines and sines and its pairs belong to
  // it alone, so no value depends on the thread count.
  constexpr std::int64_t kRowChunk = 8;
  const std::int64_t rows = pos.outer * pos.extent;
  parallel_for((rows + kRowChunk - 1) / kRowChunk, [&](std::int64_t chunk) {
    RopeAngles<T> scratch;
    const std::int64_t last = std::min(rows, (chunk + 1) * kRowChunk);
    for (std::int64_t r = chunk * kRowChunk; r < last; ++r) {
      const std::int64_t outer = r / pos.extent, p = r % pos.extent;
      const std::int64_t row = pos.flat(outer, p, 0);
      const RopeAngles<T>& angles = rope_angles(inv_freq, params.theta, dim.extent,
                                                positions[static_cast<std::size_t>(p)], scratch);
      const std::vector<T>& cosines = angles.cosines;
      const std::vector<T>& sines = angles.sines;
      for (std::int64_t inner = 0; inner < pos.inner; ++inner) {
        // Every inner element is visited; those at head_dim index 0 start a vector.
        if ((inner / dim.inner) % dim.extent != 0) continue;
        for (std::int64_t i = 0; i < planes; ++i) {
          const RopePair pair = rope_pair(params.convention, dim.extent, i);
          rotate(row + inner + pair.a * dim.inner, row + inner + pair.b * dim.inner,
                 cosines[static_cast<std::size_t>(i)], sines[static_cast<std::size_t>(i)]);
        }
      }
    }
  });
}

}  // namespace detail

template <typename T>
void rope_forward(const Tensor<T>& x, const std::vector<std::int64_t>& positions,
                  const RopeParams& params, Tensor<T>& y) {
  y = Tensor<T>(x.shape());
  detail::for_each_rope_pair<T>(
      x.shape(), positions, params,
      [&](std::int64_t at_a, std::int64_t at_b, const T& cosine, const T& sine) {
        y[at_a] = x[at_a] * cosine - x[at_b] * sine;
        y[at_b] = x[at_b] * cosine + x[at_a] * sine;
      });
}

template <typename T>
void rope_backward(const Tensor<T>& dy, const std::vector<std::int64_t>& positions,
                   const RopeParams& params, Tensor<T>& dx) {
  dx = Tensor<T>(dy.shape());
  detail::for_each_rope_pair<T>(
      dy.shape(), positions, params,
      [&](std::int64_t at_a, std::int64_t at_b, const T& cosine, const T& sine) {
        dx[at_a] = dy[at_a] * cosine + dy[at_b] * sine;
        dx[at_b] = dy[at_b] * cosine - dy[at_a] * sine;
      });
}

}  // namespace shardsim

// Explicit instantiation list: the op's .cpp instantiates float and double, and CMakeLists.txt
// finds this macro and generates the Mp, NarrowFloat, Dd and Qd units.
#define SHARDSIM_INSTANTIATE_ROPE(T)                                              \
  template void rope_forward(const Tensor<T>&, const std::vector<std::int64_t>&,  \
                             const RopeParams&, Tensor<T>&);                      \
  template void rope_backward(const Tensor<T>&, const std::vector<std::int64_t>&, \
                              const RopeParams&, Tensor<T>&);
