// The f32/f64 versions of the LayerNorm block passes (layer_norm_blocks-inl.hpp calls them when
// detail::kLaneSums<T>): the row sums in the lane order of lane_sums.hpp, and the elementwise
// passes one lane vector (8 floats or 4 doubles) at a time on rows stored contiguously. Each value
// is computed with the operations of the generic pass, in its order; only the row sums are
// regrouped into lanes, and parameter gradients still accumulate one row after the other (each
// dweight[i], dbias[i] adds the block's rows q = 0, 1, ... in turn, as before). Unit: the rows'
// elements are adjacent (stride 1), so a vector's positions are one load; otherwise they are
// gathered.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/lane_sums.hpp"
#include "ops/layer_norm/layer_norm.hpp"
#include "ops/norm_rows.hpp"

namespace shardsim::detail {

// v = position i of p (a scalar: V = T) or positions i..i+W-1 (V = LaneVec<T>), p pointing
// at i.
template <bool Unit, typename T, typename V>
void lane_load(V& v, const T* p, std::int64_t stride) {
  if constexpr (std::is_same_v<V, T>) {
    v = *p;
  } else {
    load_lanes<Unit>(v, p, stride);
  }
}

// The K row sums of the block's rows over [0, count) in the lane order (lane_row_sums), run in
// the instruction set lane_isa() names. term(q, at, i, terms) writes the terms of row q's
// position i (a scalar: terms is std::array<T, K>) or positions i..i+W-1 (a vector), at being
// the flat index of row q's position i and Unit/stride giving the step between positions.
template <bool Unit, typename T, int N, int K, typename Term>
std::array<RowValues<T, N>, K> lane_block_sums(const RowBlock<N>& block, std::int64_t count,
                                               Term&& term) {
  const std::int64_t stride = Unit ? 1 : block.stride;
  std::array<RowValues<T, N>, K> total;
  run_lanes([&] {
    lane_row_sums<T, N, K>(
        count,
        [&](int q, std::int64_t i, auto& terms) {
          term(q, block.base[q] + i * stride, i, stride, terms);
        },
        total);
  });
  return total;
}

// The block's row sums of x (K = 1) over [0, count): sum[q].
template <bool Unit, typename T, int N>
void lane_sum_of(RowBlock<N> block, const T* x, std::int64_t count, RowValues<T, N>& sum) {
  sum = lane_block_sums<Unit, T, N, 1>(
      block, count, [&](int, std::int64_t at, std::int64_t, std::int64_t stride, auto& terms) {
        lane_load<Unit>(terms[0], x + at, stride);
      })[0];
}

// The block's sums of (x - centre[q])^2 over [0, count): sum_sq[q].
template <bool Unit, typename T, int N>
void lane_centred_squares(RowBlock<N> block, const T* x, std::int64_t count,
                          const RowValues<T, N>& centre, RowValues<T, N>& sum_sq) {
  sum_sq = lane_block_sums<Unit, T, N, 1>(
      block, count, [&](int q, std::int64_t at, std::int64_t, std::int64_t stride, auto& terms) {
        auto& centred = terms[0];
        lane_load<Unit>(centred, x + at, stride);
        centred = centred - centre[q];
        centred = centred * centred;
      })[0];
}

// The block's sums of x and of x * x over [0, count).
template <bool Unit, typename T, int N>
void lane_sums_and_squares(RowBlock<N> block, const T* x, std::int64_t count, RowValues<T, N>& sum,
                           RowValues<T, N>& sum_sq) {
  const auto total = lane_block_sums<Unit, T, N, 2>(
      block, count, [&](int, std::int64_t at, std::int64_t, std::int64_t stride, auto& terms) {
        lane_load<Unit>(terms[0], x + at, stride);
        terms[1] = terms[0] * terms[0];
      });
  sum = total[0];
  sum_sq = total[1];
}

// The backward's two row sums over [0, count): sum of dnorm = dy * weight (dy without weight) and
// of dnorm * norm, norm = (x - mean) * rstd.
template <bool Unit, typename T, int N>
void lane_backward_sums(RowBlock<N> block, const T* dy, const T* x, const T* weight,
                        const RowValues<T, N>& mean, const RowValues<T, N>& rstd,
                        std::int64_t count, RowValues<T, N>& dnorm_total,
                        RowValues<T, N>& dnorm_norm_total) {
  const auto total = lane_block_sums<Unit, T, N, 2>(
      block, count, [&](int q, std::int64_t at, std::int64_t i, std::int64_t stride, auto& terms) {
        using V = std::remove_reference_t<decltype(terms[0])>;
        V norm, scale;
        lane_load<Unit>(norm, x + at, stride);
        norm = (norm - mean[q]) * rstd[q];
        auto& dnorm = terms[0];
        lane_load<Unit>(dnorm, dy + at, stride);
        if (weight) {
          lane_load<true>(scale, weight + i, 1);
          dnorm = dnorm * scale;
        }
        terms[1] = dnorm * norm;
      });
  dnorm_total = total[0];
  dnorm_norm_total = total[1];
}

// A bf16 run's store of a lane vector of floats (LayerNormParams::store): each element rounded
// to bf16 as storage.hpp's round_to_bf16 does it, with the same integer operations lane by lane
// (add 0x7fff plus the lowest kept bit, clear the low 16 bits; a NaN becomes the quiet NaN with
// its sign), so the bits are those of the boundary's rounding. Rounded: the kernels' `Bf16`.
template <bool Bf16, typename T>
void store_rounded(T* p, const LaneVec<T>& v) {
  if constexpr (Bf16) {
    static_assert(std::is_same_v<T, float>);
    typedef std::uint32_t Bits __attribute__((vector_size(sizeof(LaneVec<T>))));
    typedef std::int32_t Signed __attribute__((vector_size(sizeof(LaneVec<T>))));
    Bits bits;
    std::memcpy(&bits, &v, sizeof bits);
    const Bits rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;
    const Bits quiet_nan = (bits & 0x80000000u) | 0x7fc00000u;
    // All ones where the magnitude is above the infinity's (a NaN); a signed compare, since the
    // magnitude is below 2^31.
    const Bits nan = reinterpret_cast<Bits>(reinterpret_cast<Signed>(bits & 0x7fffffffu) >
                                            static_cast<std::int32_t>(0x7f800000));
    const Bits out = (nan & quiet_nan) | (~nan & rounded);
    std::memcpy(p, &out, sizeof out);
  } else {
    store_lanes(p, v);
  }
}

// y = (((x - mean) * rstd) * weight) + bias on positions [0, valid) of one contiguous row (the
// generic pass's operations in its order), a vector at a time, each vector rounded to bf16 as it
// is stored when Bf16; returns the first position not written (the scalar tail is the caller's).
// Every argument is a value: the loop's stores (memcpy, which may alias anything) then cannot
// force reloads of a captured variable.
template <bool Bf16, typename T>
std::int64_t lane_apply_row_body(const T* x, const T* weight, const T* bias, T mean, T rstd,
                                 std::int64_t valid, T* y) {
  std::int64_t i = 0;
  LaneVec<T> out, operand;
  for (; i + kVecWidth<T> <= valid; i += kVecWidth<T>) {
    load_lanes<true>(out, x + i, 1);
    out = (out - mean) * rstd;
    if (weight) {
      load_lanes<true>(operand, weight + i, 1);
      out = out * operand;
    }
    if (bias) {
      load_lanes<true>(operand, bias + i, 1);
      out = out + operand;
    }
    store_rounded<Bf16>(y + i, out);
  }
  return i;
}

template <bool Bf16, typename T>
std::int64_t lane_apply_row(const T* x, const T* weight, const T* bias, T mean, T rstd,
                            std::int64_t valid, T* y) {
  std::int64_t done = 0;
  run_lanes([&] { done = lane_apply_row_body<Bf16>(x, weight, bias, mean, rstd, valid, y); });
  return done;
}

// The backward's elementwise pass on positions [0, valid) of one contiguous row, a vector at a
// time (the generic pass's operations in its order), dx rounded to bf16 as it is stored when
// Bf16; returns the first position not written.
template <bool Bf16, typename T>
std::int64_t lane_backward_apply_row_body(const T* dy, const T* x, const T* weight, T mean, T rstd,
                                          T dnorm_mean, T dnorm_norm_mean, std::int64_t valid,
                                          T* dx, T* dweight, T* dbias) {
  std::int64_t i = 0;
  LaneVec<T> grad, norm, dnorm, operand;
  for (; i + kVecWidth<T> <= valid; i += kVecWidth<T>) {
    load_lanes<true>(grad, dy + i, 1);
    load_lanes<true>(norm, x + i, 1);
    norm = (norm - mean) * rstd;
    dnorm = grad;
    if (weight) {
      load_lanes<true>(operand, weight + i, 1);
      dnorm = grad * operand;
    }
    if (dbias) {
      load_lanes<true>(operand, dbias + i, 1);
      store_lanes(dbias + i, operand + grad);
    }
    if (dweight) {
      load_lanes<true>(operand, dweight + i, 1);
      store_lanes(dweight + i, operand + grad * norm);
    }
    dnorm = dnorm - dnorm_mean;
    dnorm = dnorm - norm * dnorm_norm_mean;
    store_rounded<Bf16>(dx + i, dnorm * rstd);
  }
  return i;
}

template <bool Bf16, typename T>
std::int64_t lane_backward_apply_row(const T* dy, const T* x, const T* weight, T mean, T rstd,
                                     T dnorm_mean, T dnorm_norm_mean, std::int64_t valid, T* dx,
                                     T* dweight, T* dbias) {
  std::int64_t done = 0;
  run_lanes([&] {
    done = lane_backward_apply_row_body<Bf16>(dy, x, weight, mean, rstd, dnorm_mean,
                                              dnorm_norm_mean, valid, dx, dweight, dbias);
  });
  return done;
}

}  // namespace shardsim::detail
