// The documented summation order of LayerNorm's row sums at f32 and f64, and the lane vectors
// the f32/f64 LayerNorm passes use (docs/threads-and-memory.md "Row sums in lanes, and the other
// kernels' orders": the order is part of the contract).
//
// A row sum over positions i in [0, n) runs in kSumLanes = 8 interleaved partial sums: lane j adds
// the terms of positions j, j + 8, j + 16, ... in ascending order, starting from +0, and the lanes
// combine by the fixed tree ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)). The order depends
// on nothing but n: not on the machine, the compiler, the row's stride or the thread count. Every
// term is computed with the same operations, in the same order, as the scalar formula (only the
// accumulation is regrouped), and no operation is fused (-ffp-contract=off), so the vector code
// and the scalar tail give the same bits as a plain loop over eight scalar lanes (the tests'
// reference).
//
// At mp, dd and qd a row sum stays one accumulator over ascending i: nothing to gain in speed,
// and the goldens (rounded from the reference precision) keep their bits.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/lane_isa.hpp"

namespace shardsim::detail {

inline constexpr int kSumLanes = 8;

// Whether LayerNorm's row sums use the lane order (f32 and f64, the narrow formats' f32 compute
// included), or one ascending accumulator (mp, dd, qd).
template <typename T>
inline constexpr bool kLaneSums = std::is_same_v<T, float> || std::is_same_v<T, double>;

// The vectors the lanes live in: GCC vectors of 32 bytes, eight floats or four doubles (so the
// eight lanes of a double sum are two vectors: lanes 0-3 and 4-7). Every operator acts element
// by element with IEEE rounding, as the scalar operator would; a 32-byte vector is one register
// in the AVX2 copies and a pair of SSE2 registers otherwise. (A single 64-byte vector of eight
// doubles is lowered through the stack without AVX-512 and ran markedly slower.)
template <typename T>
struct LaneVector;
template <>
struct LaneVector<float> {
  typedef float type __attribute__((vector_size(32)));
};
template <>
struct LaneVector<double> {
  typedef double type __attribute__((vector_size(32)));
};
template <typename T>
using LaneVec = typename LaneVector<T>::type;

// Elements per vector, and vectors per eight lanes.
template <typename T>
inline constexpr int kVecWidth = static_cast<int>(sizeof(LaneVec<T>) / sizeof(T));
template <typename T>
inline constexpr int kVecsPerLanes = kSumLanes / kVecWidth<T>;

// Runs f() compiled for the instruction set lane_isa() names. `flatten` inlines everything f
// calls into the copy, so the AVX2 copy's vector code uses 256-bit registers; both copies run the
// same operations in the same order (lane_isa.hpp), hence give the same bits.
template <typename F>
[[gnu::flatten]] void run_lanes_baseline(F& f) {
  f();
}
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
template <typename F>
[[gnu::target("avx2"), gnu::flatten]] void run_lanes_avx2(F& f) {
  f();
}
#endif

template <typename F>
void run_lanes(F&& f) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (lane_isa() == LaneIsa::avx2) {
    run_lanes_avx2(f);
    return;
  }
#endif
  run_lanes_baseline(f);
}

// v = positions i, i + stride, ..., i + (W - 1) stride of p, W = kVecWidth<T> (Unit: stride 1,
// one unaligned load). (Vectors leave functions through references: GCC warns, -Wpsabi, about
// returning a vector wider than the build's registers.)
template <bool Unit, typename T>
void load_lanes(LaneVec<T>& v, const T* p, std::int64_t stride) {
  if constexpr (Unit) {
    std::memcpy(&v, p, sizeof v);
  } else if constexpr (kVecWidth<T> == 8) {
    v = LaneVec<T>{p[0],          p[stride],     p[2 * stride], p[3 * stride],
                   p[4 * stride], p[5 * stride], p[6 * stride], p[7 * stride]};
  } else {
    static_assert(kVecWidth<T> == 4);
    v = LaneVec<T>{p[0], p[stride], p[2 * stride], p[3 * stride]};
  }
}

template <typename T>
void store_lanes(T* p, const LaneVec<T>& v) {
  std::memcpy(p, &v, sizeof v);
}

// The row sums of a block of N rows in the lane order: for each of the K sums and each row q,
// total[k][q] = sum over i in [0, count) of the k-th term of position i of row q.
// term(q, i, terms) writes the K terms of positions i..i+W-1 (W = kVecWidth<T>) when terms is a
// std::array<LaneVec<T>, K>, those of position i alone when it is a std::array<T, K> (the tail,
// count % 8 positions, each into its own lane). Lane j of a row lives in element j % W of its
// vector j / W. Each row's sums are independent of the others', so how many rows run side by
// side changes no bit.
template <typename T, int N, int K, typename Term>
void lane_row_sums(std::int64_t count, Term&& term,
                   std::array<std::array<T, static_cast<std::size_t>(N)>, K>& total) {
  constexpr int W = kVecWidth<T>;
  constexpr int P = kVecsPerLanes<T>;
  // R rows side by side, as many as keep the K * R * P accumulators in eight 16-byte registers
  // (SSE2 has sixteen; the rest hold the terms). R divides N (1 or kNormRowBlock = 4).
  constexpr int kRegisters = static_cast<int>(sizeof(LaneVec<T>) / 16) * P;
  constexpr int kWide = 8 / (K * kRegisters) > 0 ? 8 / (K * kRegisters) : 1;
  constexpr int R = kWide < N ? kWide : N;
  static_assert(N % R == 0);
  const std::int64_t full = count - count % kSumLanes;
  for (int first = 0; first < N; first += R) {
    LaneVec<T> acc[K][R][P];
    for (int k = 0; k < K; ++k) {
      for (int r = 0; r < R; ++r) {
        for (int v = 0; v < P; ++v) acc[k][r][v] = LaneVec<T>{};
      }
    }
    std::array<LaneVec<T>, K> terms{};
    for (std::int64_t i = 0; i < full; i += kSumLanes) {
      for (int r = 0; r < R; ++r) {
        for (int v = 0; v < P; ++v) {
          term(first + r, i + v * W, terms);
          for (int k = 0; k < K; ++k) acc[k][r][v] += terms[k];
        }
      }
    }
    std::array<T, K> tail{};
    for (std::int64_t i = full; i < count; ++i) {
      const std::int64_t lane = i - full;
      for (int r = 0; r < R; ++r) {
        term(first + r, i, tail);
        for (int k = 0; k < K; ++k) acc[k][r][lane / W][lane % W] += tail[k];
      }
    }
    for (int k = 0; k < K; ++k) {
      for (int r = 0; r < R; ++r) {
        const auto l = [&](int j) { return acc[k][r][j / W][j % W]; };
        // The fixed tree over the lanes.
        total[k][first + r] = ((l(0) + l(1)) + (l(2) + l(3))) + ((l(4) + l(5)) + (l(6) + l(7)));
      }
    }
  }
}

}  // namespace shardsim::detail
