// The per-block passes of the LayerNorm kernels (ops/layer_norm.hpp), over one RowBlock of
// detail::for_each_row (norm_rows.hpp): the row statistics and the normalization of the
// forward, the two row reductions and the elementwise pass of the backward. Each kernel in
// layer_norm-inl.hpp is one or two of these over the rows, so every arithmetic operation of
// LayerNorm is written once, here.
//
// Within a block, each row has its own accumulators (one sum over ascending positions; at f32
// and f64 the lanes of lane_sums.hpp, through layer_norm_lanes-inl.hpp); work
// that accumulates across rows (dweight, dbias) visits the block's rows in order. The forward
// passes write through add_into/sub_into/mul_into into scratch made once per block, so an Mp
// run allocates nothing per element (scalar.hpp); with floats these are the plain operators.
#pragma once

#include <cstdint>
#include <optional>
#include <type_traits>

#include "core/scalar.hpp"
#include "core/storage.hpp"
#include "ops/layer_norm/layer_norm.hpp"
#include "ops/layer_norm/layer_norm_lanes-inl.hpp"
#include "ops/norm_rows.hpp"

namespace shardsim {

namespace detail {

// What layer_norm_block_stats needs besides the rows, made once per call.
template <typename T>
struct LayerNormStatsPolicy {
  const LayerNormFaults& faults;
  const T* shared_mean;  // combine_token_means: the mean every row is centred on; else null
  T count;               // H, the mean's divisor
  T variance_divisor;    // faults.variance_divisor(H)
  T eps;
};

template <typename T>
LayerNormStatsPolicy<T> layer_norm_stats_policy(std::int64_t extent, const LayerNormParams& params,
                                                const LayerNormFaults& faults,
                                                const T* shared_mean) {
  SHARDSIM_ASSERT((shared_mean != nullptr) == faults.combine_token_means,
                  "a shared mean comes with combine_token_means, and only with it");
  return {faults, shared_mean, T(extent), T(faults.variance_divisor(extent)), T(params.eps)};
}

// Calls f(std::true_type) when the block's rows are contiguous (stride 1), else
// f(std::false_type): the Unit argument of the lane passes (layer_norm_lanes-inl.hpp).
template <int N, typename F>
void with_row_stride(const RowBlock<N>& block, F&& f) {
  if (block.stride == 1) {
    f(std::true_type{});
  } else {
    f(std::false_type{});
  }
}

// mean and rstd of the block's rows, each row's sums in the row-sum order (layer_norm.hpp).
// mean, rstd: (N), written.
template <typename T, int N>
void layer_norm_block_stats(RowBlock<N> block, const Tensor<T>& x, std::int64_t extent,
                            const LayerNormStatsPolicy<T>& policy, RowValues<T, N>& mean,
                            RowValues<T, N>& rstd) {
  RowValues<T, N> row_sum, sum_sq, centered;  // (N), written through *_into
  if (policy.faults.centres_on_own_mean()) {
    if constexpr (kLaneSums<T>) {
      with_row_stride(block, [&](auto unit) {
        lane_sum_of<decltype(unit)::value>(block, x.data(), extent, row_sum);
      });
    } else {
      for (int q = 0; q < N; ++q) row_sum[q] = T(0);
      for (std::int64_t i = 0; i < extent; ++i) {
        for (int q = 0; q < N; ++q) add_into(row_sum[q], row_sum[q], x[block.at(q, i)]);
      }
    }
    for (int q = 0; q < N; ++q) mean[q] = row_sum[q] / policy.count;
  } else {
    for (int q = 0; q < N; ++q) mean[q] = policy.shared_mean ? *policy.shared_mean : T(0);
  }
  // What each row is centred on, as a local copy for the loop: reading the caller's array
  // instead, GCC 12 compiles the f32 loop to markedly slower code.
  const RowValues<T, N> centre = mean;
  if constexpr (kLaneSums<T>) {
    with_row_stride(block, [&](auto unit) {
      lane_centred_squares<decltype(unit)::value>(block, x.data(), extent, centre, sum_sq);
    });
  } else {
    for (int q = 0; q < N; ++q) sum_sq[q] = T(0);
    for (std::int64_t i = 0; i < extent; ++i) {
      for (int q = 0; q < N; ++q) {
        sub_into(centered[q], x[block.at(q, i)], centre[q]);
        mul_into(centered[q], centered[q], centered[q]);
        add_into(sum_sq[q], sum_sq[q], centered[q]);
      }
    }
  }
  for (int q = 0; q < N; ++q) {
    const T var = sum_sq[q] / policy.variance_divisor;
    rstd[q] = policy.faults.rstd(var, policy.eps);
  }
}

// A bf16/f16 run's stores (LayerNormParams::store): positions [from, extent) of the block's row q
// in `out`, rounded to the storage format right after the row was written, while it is still in
// cache (the lane passes round the positions before `from` as they store them: store_rounded).
// The rounding is storage.hpp's round_to_narrow, the function the boundary applies, and it is
// idempotent (a pad position's 0 stays 0). Only at T = float.
template <typename T, int N>
void round_row_stores(const RowBlock<N>& block, int q, const std::optional<NarrowFormat>& store,
                      std::int64_t from, std::int64_t extent, Tensor<T>& out) {
  if constexpr (std::is_same_v<T, float>) {
    if (!store || from >= extent) return;
    if (block.stride == 1) {
      round_to_narrow(*store, out.data() + block.at(q, from), extent - from);
      return;
    }
    for (std::int64_t i = from; i < extent; ++i) {
      float& value = out[block.at(q, i)];
      value = round_to_narrow(*store, value);
    }
  } else {
    (void)block, (void)q, (void)store, (void)from, (void)extent, (void)out;
  }
}

// Runs a lane pass `apply(std::bool_constant<Bf16>)` with Bf16 set where its stores are to be
// rounded to bf16 (f32 arithmetic, bf16 storage); returns its count of positions written, and in
// `rounded` those it rounded (0 without Bf16).
template <typename T, typename Apply>
std::int64_t lanes_with_stores(const std::optional<NarrowFormat>& store, std::int64_t& rounded,
                               Apply&& apply) {
  if constexpr (std::is_same_v<T, float>) {
    if (store == NarrowFormat::bf16) return rounded = apply(std::true_type{});
  } else {
    (void)store;
  }
  (void)rounded;
  return apply(std::false_type{});
}

// y on positions [0, valid) of the block's rows, 0 on [valid, extent), given the rows' mean and
// rstd: (N).
template <typename T, int N>
void layer_norm_block_apply(RowBlock<N> block, const Tensor<T>& x, const Tensor<T>* weight,
                            const Tensor<T>* bias, const RowValues<T, N>& mean,
                            const RowValues<T, N>& rstd, const LayerNormFaults& faults,
                            std::int64_t valid, std::int64_t extent, Tensor<T>& y,
                            const std::optional<NarrowFormat>& store) {
  T out = T(0);  // scratch, written through *_into
  for (int q = 0; q < N; ++q) {
    // The row's values held in locals for the element loop: read through the arrays and the
    // block instead, GCC 12 compiles the f32 loop to markedly slower code.
    const T& row_mean = mean[q];
    const T& row_rstd = rstd[q];
    const std::int64_t base = block.base[q];
    const std::int64_t stride = block.stride;
    std::int64_t i = 0;
    std::int64_t rounded = 0;  // positions the lane pass stored rounded
    if constexpr (kLaneSums<T>) {
      if (stride == 1 && !faults.dtype_mismatch) {
        const auto apply = [&](auto bf16) {
          return lane_apply_row<decltype(bf16)::value>(
              x.data() + base, weight ? weight->data() : nullptr, bias ? bias->data() : nullptr,
              row_mean, row_rstd, valid, y.data() + base);
        };
        i = lanes_with_stores<T>(store, rounded, apply);
      }
    }
    for (; i < valid; ++i) {
      const std::int64_t at = base + i * stride;
      sub_into(out, x[at], row_mean);
      mul_into(out, out, row_rstd);
      faults.round_normalized(out);
      if (weight) mul_into(out, out, (*weight)[i]);
      if (bias) add_into(out, out, (*bias)[i]);
      y[at] = out;
    }
    for (std::int64_t i = valid; i < extent; ++i) y[block.at(q, i)] = T(0);
    round_row_stores(block, q, store, rounded, extent, y);
  }
}

// The backward's two row reductions over [0, valid) of the block's rows, row-sum order.
// dnorm_total, dnorm_norm_total: (N), written.
template <typename T, int N>
void layer_norm_block_backward_sums(RowBlock<N> block, const Tensor<T>& dy, const Tensor<T>& x,
                                    const Tensor<T>* weight, const LayerNormSaved<T>& stats,
                                    std::int64_t valid, RowValues<T, N>& dnorm_total,
                                    RowValues<T, N>& dnorm_norm_total) {
  RowValues<T, N> mean, rstd;  // (N) local copies of the rows' statistics
  for (int q = 0; q < N; ++q) {
    mean[q] = stats.mean[block.row(q)];
    rstd[q] = stats.rstd[block.row(q)];
    dnorm_total[q] = T(0);
    dnorm_norm_total[q] = T(0);
  }
  if constexpr (kLaneSums<T>) {
    with_row_stride(block, [&](auto unit) {
      lane_backward_sums<decltype(unit)::value>(block, dy.data(), x.data(),
                                                weight ? weight->data() : nullptr, mean, rstd,
                                                valid, dnorm_total, dnorm_norm_total);
    });
    return;
  }
  T norm = T(0), dnorm = T(0);  // in place (scalar.hpp): no Mp temporary per element
  for (std::int64_t i = 0; i < valid; ++i) {
    for (int q = 0; q < N; ++q) {
      const std::int64_t at = block.at(q, i);
      sub_into(norm, x[at], mean[q]);
      mul_into(norm, norm, rstd[q]);
      if (weight) {
        mul_into(dnorm, dy[at], (*weight)[i]);
      } else {
        dnorm = dy[at];
      }
      add_into(dnorm_total[q], dnorm_total[q], dnorm);
      mul_into(dnorm, dnorm, norm);
      add_into(dnorm_norm_total[q], dnorm_norm_total[q], dnorm);
    }
  }
}

// dx on [0, valid) of the block's rows (0 on [valid, extent)), given each row's mean(dnorm) and
// mean(dnorm * norm) over the full row; dweight/dbias accumulate, one row after the other.
template <typename T, int N>
void layer_norm_block_backward_apply(RowBlock<N> block, const Tensor<T>& dy, const Tensor<T>& x,
                                     const Tensor<T>* weight, const LayerNormSaved<T>& stats,
                                     const RowValues<T, N>& dnorm_mean,
                                     const RowValues<T, N>& dnorm_norm_mean, std::int64_t valid,
                                     std::int64_t extent, Tensor<T>& dx, Tensor<T>* dweight,
                                     Tensor<T>* dbias, const std::optional<NarrowFormat>& store) {
  T norm = T(0), dnorm = T(0), product = T(0);  // in place (scalar.hpp): no Mp temporaries
  for (int q = 0; q < N; ++q) {
    // Local copies: stores into dx, dweight and dbias cannot alias them.
    const T mean = stats.mean[block.row(q)];
    const T rstd = stats.rstd[block.row(q)];
    const T row_dnorm_mean = dnorm_mean[q];
    const T row_dnorm_norm_mean = dnorm_norm_mean[q];
    std::int64_t i = 0;
    std::int64_t rounded = 0;  // positions the lane pass stored rounded
    if constexpr (kLaneSums<T>) {
      if (block.stride == 1) {
        const std::int64_t base = block.base[q];
        const auto apply = [&](auto bf16) {
          return lane_backward_apply_row<decltype(bf16)::value>(
              dy.data() + base, x.data() + base, weight ? weight->data() : nullptr, mean, rstd,
              row_dnorm_mean, row_dnorm_norm_mean, valid, dx.data() + base,
              dweight ? dweight->data() : nullptr, dbias ? dbias->data() : nullptr);
        };
        i = lanes_with_stores<T>(store, rounded, apply);
      }
    }
    for (; i < valid; ++i) {
      const std::int64_t at = block.at(q, i);
      sub_into(norm, x[at], mean);
      mul_into(norm, norm, rstd);
      if (weight) {
        mul_into(dnorm, dy[at], (*weight)[i]);
      } else {
        dnorm = dy[at];
      }
      if (dbias) add_into((*dbias)[i], (*dbias)[i], dy[at]);
      if (dweight) {
        mul_into(product, dy[at], norm);
        add_into((*dweight)[i], (*dweight)[i], product);
      }
      // term 1: dnorm; term 2: - mean(dnorm) (through the mean);
      // term 3: - norm * mean(dnorm * norm) (through the variance).
      // dx = ((dnorm - mean(dnorm)) - norm * mean(dnorm * norm)) * rstd
      sub_into(dnorm, dnorm, row_dnorm_mean);
      mul_into(product, norm, row_dnorm_norm_mean);
      sub_into(dnorm, dnorm, product);
      mul_into(dx[at], dnorm, rstd);
    }
    for (std::int64_t i = valid; i < extent; ++i) dx[block.at(q, i)] = T(0);
    round_row_stores(block, q, store, rounded, extent, dx);
  }
}

}  // namespace detail

}  // namespace shardsim
