// Row iteration for the normalization kernels (LayerNorm, RMSNorm), over one rank's tensor.
//
// A tensor normalized over `axis` is a set of rows: every position of the other axes is one row.
// With view = AxisView::of(x.shape(), axis), row r = o * view.inner + j (o < view.outer,
// j < view.inner) is element r of x.shape().without(axis), the shape of the row statistics, and
// its element i (i < view.extent) is x[view.flat(o, i, j)] = x[base(r) + i * view.inner].
//
// for_each_row hands the rows out in ascending order, in blocks of kNormRowBlock consecutive rows
// and then one row at a time for the tail. A kernel reduces the rows of a block side by side:
// each row keeps its own accumulators, summed in the kernel's row-sum order (ascending i, or
// LayerNorm's lanes at f32/f64: layer_norm.hpp), so every result is bitwise what one row at a
// time gives; the independent chains only keep the adder busy (a single sequential sum waits on
// its own latency). Work that must run in row order, such as accumulating a parameter gradient
// over rows, visits the block's rows q = 0, 1, ... in turn.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/error.hpp"
#include "core/parallel.hpp"
#include "core/shape.hpp"

namespace shardsim::detail {

inline constexpr int kNormRowBlock = 4;

// The rows a concurrent pass (for_each_row_concurrently) takes side by side for scalar type T:
// kNormRowBlock for values held in registers (side-by-side rows keep the adder busy), one for
// values whose every operation is a library call on storage (Mp: the interleaving only spreads
// the block's reads over four rows, measured 4-5% slower than one row, `shardsim_bench --only 3`).
// Each row's sums are its own either way, so the bits do not depend on it.
template <typename T>
inline constexpr int kConcurrentRowBlock = std::is_trivially_copyable_v<T> ? kNormRowBlock : 1;

// Rows first, first + 1, ..., first + size - 1 of a tensor viewed along its normalized axis.
template <int N>
struct RowBlock {
  static constexpr int size = N;
  std::int64_t first = 0;
  std::array<std::int64_t, N> base{};  // (N) flat index of each row's element 0
  std::int64_t stride = 1;             // flat distance between a row's elements i and i + 1

  // The row's index into the (rows) statistics.
  std::int64_t row(int q) const { return first + q; }
  // Flat index of element i of the block's row q.
  std::int64_t at(int q, std::int64_t i) const { return base[q] + i * stride; }
};

// One value per row of a RowBlock<N>: (N). (The size is written so that N is deduced from the
// block alone.)
template <typename T, int N>
using RowValues = std::array<T, static_cast<std::size_t>(N)>;

// The number of rows in the RowBlock a for_each_row callback receives as `block`.
template <typename Block>
inline constexpr int rows_in = std::remove_cvref_t<Block>::size;

// For the passes over positions [0, valid) of every row.
inline void require_valid_positions(const AxisView& view, std::int64_t valid) {
  SHARDSIM_ASSERT(valid >= 0 && valid <= view.extent, "valid positions out of range");
}

// The block of N rows starting at row `first`.
template <int N>
RowBlock<N> row_block(const AxisView& view, std::int64_t first) {
  RowBlock<N> block;
  block.first = first;
  block.stride = view.inner;
  for (int q = 0; q < N; ++q) {
    const std::int64_t row = first + q;
    block.base[q] = view.flat(row / view.inner, 0, row % view.inner);
  }
  return block;
}

// Calls f(RowBlock<kNormRowBlock>) for each full block of rows, then f(RowBlock<1>) for each
// remaining row, covering rows [0, view.outer * view.inner) in ascending order.
template <typename F>
void for_each_row(const AxisView& view, F&& f) {
  const std::int64_t rows = view.outer * view.inner;
  std::int64_t first = 0;
  for (; first + kNormRowBlock <= rows; first += kNormRowBlock) {
    f(row_block<kNormRowBlock>(view, first));
  }
  for (; first < rows; ++first) f(row_block<1>(view, first));
}

// Blocks as for_each_row's, but of Block rows (kConcurrentRowBlock of the pass's scalar type), run
// concurrently (parallel.hpp). Only for passes whose blocks are independent: a block reads its own
// rows and writes only its own rows' outputs, so the blocking changes no bit. Anything accumulated
// across rows (a parameter gradient) keeps for_each_row's order instead.
template <int Block, typename F>
void for_each_row_concurrently(const AxisView& view, F&& f) {
  const std::int64_t rows = view.outer * view.inner;
  const std::int64_t full = rows / Block;  // then rows % Block single rows
  parallel_for(full + rows % Block, [&](std::int64_t index) {
    if (index < full) {
      f(row_block<Block>(view, index * Block));
    } else {
      f(row_block<1>(view, full * Block + (index - full)));
    }
  });
}

}  // namespace shardsim::detail
