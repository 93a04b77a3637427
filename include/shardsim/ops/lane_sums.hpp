// The documented summation order of LayerNorm's row sums at f32 and f64, and the 8-wide vector
// values the f32/f64 LayerNorm passes use (README "Kernels": the order is part of the contract).
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

#include "shardsim/lane_isa.hpp"

// The 8-wide vectors pass between inline functions only, never across a library's interface, so
// GCC's note that their calling convention differs with -mavx / -mavx512f does not apply.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

namespace shardsim::detail {

inline constexpr int kSumLanes = 8;

// Whether LayerNorm's row sums use the lane order (f32 and f64, the narrow formats' f32 compute
// included), or one ascending accumulator (mp, dd, qd).
template <typename T>
inline constexpr bool kLaneSums = std::is_same_v<T, float> || std::is_same_v<T, double>;

// Eight values of T in one GCC vector: every operator acts lane by lane with IEEE rounding, as
// the scalar operator would (SSE2 registers without -march, 256-bit ones in the AVX2 copies).
template <typename T>
struct Lanes8;
template <>
struct Lanes8<float> {
  typedef float type __attribute__((vector_size(8 * sizeof(float))));
};
template <>
struct Lanes8<double> {
  typedef double type __attribute__((vector_size(8 * sizeof(double))));
};
template <typename T>
using Vec8 = typename Lanes8<T>::type;

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

// The AVX2 copy runs f32 only: GCC lowers the 64-byte Vec8<double> to 256-bit halves through the
// stack, and on this project's machine (AMD EPYC, Zen 3) the f64 passes ran about 20% slower
// with AVX2 than with SSE2 (measured 2026-12-02; a struct of two 256-bit halves was slower still).
template <typename T>
inline constexpr bool kLanesUseAvx2 = std::is_same_v<T, float>;

template <typename T, typename F>
void run_lanes(F&& f) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (kLanesUseAvx2<T> && lane_isa() == LaneIsa::avx2) {
    run_lanes_avx2(f);
    return;
  }
#endif
  run_lanes_baseline(f);
}

// v = positions i, i + stride, ..., i + 7 stride of p (Unit: stride 1, one unaligned load).
// (Vectors leave functions through references: GCC warns, -Wpsabi, about returning a vector
// wider than the build's registers.)
template <bool Unit, typename T>
void load8(Vec8<T>& v, const T* p, std::int64_t stride) {
  if constexpr (Unit) {
    std::memcpy(&v, p, sizeof v);
  } else {
    v = Vec8<T>{p[0],          p[stride],     p[2 * stride], p[3 * stride],
                p[4 * stride], p[5 * stride], p[6 * stride], p[7 * stride]};
  }
}

template <typename T>
void store8(T* p, const Vec8<T>& v) {
  std::memcpy(p, &v, sizeof v);
}

// The fixed tree over the lanes.
template <typename T, typename Lanes>
T lane_total(const Lanes& lane) {
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

// The row sums of a block of N rows in the lane order: for each of the K sums and each row q,
// total[k][q] = sum over i in [0, count) of the k-th term of position i of row q.
// term(q, i, terms) writes the K terms of positions i..i+7 when terms is a
// std::array<Vec8<T>, K>, those of position i alone when it is a std::array<T, K> (the tail,
// count % 8 positions, each into its own lane). Each row's sums are independent of the
// others', so how many rows run side by side changes no bit.
template <typename T, int N, int K, typename Term>
void lane_row_sums(std::int64_t count, Term&& term,
                   std::array<std::array<T, static_cast<std::size_t>(N)>, K>& total) {
  // R rows side by side, as many as keep the K * R accumulators in eight 16-byte registers
  // (SSE2 has sixteen; the rest hold the terms). R divides N (1 or kNormRowBlock = 4).
  constexpr int kRegisters = static_cast<int>(sizeof(Vec8<T>) / 16);
  constexpr int kWide = 8 / (K * kRegisters) > 0 ? 8 / (K * kRegisters) : 1;
  constexpr int R = kWide < N ? kWide : N;
  static_assert(N % R == 0);
  const std::int64_t full = count - count % kSumLanes;
  for (int first = 0; first < N; first += R) {
    Vec8<T> acc[K][R];
    for (int k = 0; k < K; ++k) {
      for (int r = 0; r < R; ++r) acc[k][r] = Vec8<T>{};
    }
    std::array<Vec8<T>, K> terms{};
    for (std::int64_t i = 0; i < full; i += kSumLanes) {
      for (int r = 0; r < R; ++r) {
        term(first + r, i, terms);
        for (int k = 0; k < K; ++k) acc[k][r] += terms[k];
      }
    }
    std::array<T, K> tail{};
    for (std::int64_t i = full; i < count; ++i) {
      for (int r = 0; r < R; ++r) {
        term(first + r, i, tail);
        for (int k = 0; k < K; ++k) acc[k][r][i - full] += tail[k];
      }
    }
    for (int k = 0; k < K; ++k) {
      for (int r = 0; r < R; ++r) total[k][first + r] = lane_total<T>(acc[k][r]);
    }
  }
}

}  // namespace shardsim::detail

#pragma GCC diagnostic pop
