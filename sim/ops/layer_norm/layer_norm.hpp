// LayerNorm over one named axis (Ba, Kiros, Hinton 2016), per-rank kernel and dense oracle.
//
// For each row r (every position of the other axes), with H = extent of `axis`:
//   mean_r = (sum_i x_ri) / H                    sum in the row-sum order below
//   var_r  = (sum_i (x_ri - mean_r)^2) / H       biased (two-pass), eps inside the sqrt
//   rstd_r = 1 / sqrt(var_r + eps)
//   y_ri   = ((x_ri - mean_r) * rstd_r) * w_i + b_i
// The biased variance (divide by H, not H - 1) is the only convention LayerNorm uses; the
// unbiased one is a seeded fault (unbiased_variance), never an option. weight and bias are each
// optional (affine on/off, bias on/off).
//
// Row-sum order (every sum over a row's positions, forward, backward and the partial sums below;
// docs/threads-and-memory.md "Row sums in lanes"): at f32 and f64 (so also bf16/f16, which compute
// in f32) the documented lane order of lane_sums.hpp, eight interleaved partial sums (lane i % 8,
// ascending i) combined by the fixed tree ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)); at mp,
// dd and qd one accumulator over ascending i.
//
// The kernel sees one rank's rows; a rank that owns whole rows has everything it needs. It is
// also the dense oracle, applied to the global tensor: same arithmetic, same order, which is why
// the sequence-sharded plan must match it bitwise.
//
// Forward is two passes over each block of rows: the statistics (layer_norm_stats), then the
// normalization (layer_norm_apply). Both take the seeded faults as a policy argument
// (LayerNormFaults, layer_norm_faults.hpp), and the dense oracle is the same kernel with the
// no-fault policy, so the sharded plans run the oracle's arithmetic unless a fault is switched
// on. Backward is likewise the two row reductions (layer_norm_backward_sums) and the elementwise
// pass given them (layer_norm_backward_apply). Rows are visited through detail::for_each_row
// (norm_rows.hpp), several side by side, each still reduced alone in the row-sum order.
//
// The second half of this header holds the remaining building blocks of the hidden-sharded plans
// (layer_norm_hidden_plan.hpp), where a rank holds only a slice of every row: partial row
// statistics and the Welford merge. The passes that take a `valid` work on positions [0, valid)
// of the normalized axis (a padded slice has pad positions after them): the reductions sum over
// them in the row-sum order, the elementwise passes write 0 at the positions after them.
// REQUIRES: 0 <= valid <= H.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/narrow.hpp"
#include "core/tensor.hpp"
#include "ops/layer_norm/layer_norm_faults.hpp"

namespace shardsim {

// The parts a LayerNorm step records besides its output: a plan names each boundary
// part_name(output, part) (trace.hpp), and the step stores the oracle tensor under the same
// name, so both sides spell it from here.
namespace layer_norm_parts {
inline constexpr std::string_view mean = "mean";  // (rows) saved statistic
inline constexpr std::string_view rstd = "rstd";  // (rows) saved statistic
// Hidden-sharded sum_sumsq: the all-reduced per-row sum and sum of squares.
inline constexpr std::string_view sum = "sum";       // (rows)
inline constexpr std::string_view sum_sq = "sumsq";  // (rows)
// Hidden-sharded welford: every shard's (count, mean, M2), all-gathered; no oracle.
inline constexpr std::string_view moments = "moments";  // (rows..., shard, moment=3)
// combine_token_means fault: the all-reduced sum of token means and token count; no oracle.
inline constexpr std::string_view token_mean_sum = "token_mean_sum";  // scalar
inline constexpr std::string_view token_count = "token_count";        // scalar
// Hidden-sharded backward: the all-reduced row reductions, parts of grad(output).
inline constexpr std::string_view sum_dnorm = "sum_dnorm";            // (rows)
inline constexpr std::string_view sum_dnorm_norm = "sum_dnorm_norm";  // (rows)
// A destination for moved_name (trace.hpp): a Shard(axis) parameter all-gathered whole.
inline constexpr std::string_view gathered = "gathered";
}  // namespace layer_norm_parts

struct LayerNormParams {
  std::string axis = "hidden";
  double eps = 1e-5;  // f32 runs use float(eps); f64 and mp use this double exactly
  // A bf16/f16 run's storage format (storage.hpp), at T = float only (ignored at every other
  // type): the kernels round each element of their stored output, y (forward, apply) and dx
  // (backward, backward apply), to it as they write each row (bf16 in the lane kernels' vector
  // stores, otherwise by a pass over the row while it is in cache), the value the run's boundary
  // would store (storage.hpp's rounding), so that the boundary need not sweep the tensor again
  // (BoundaryLabel::stored). Parameter gradients accumulate over calls and are left to the
  // boundary.
  std::optional<NarrowFormat> store;
};

// What forward keeps for backward. Both have shape x.shape().without(axis): (rows).
// (RMSNorm keeps a different statistic, RmsNormSaved::rrms, so the two cannot be mixed up.)
template <typename T>
struct LayerNormSaved {
  Tensor<T> mean;  // (rows)
  Tensor<T> rstd;  // (rows) 1 / sqrt(var + eps)
};

// The row kernel: layer_norm_stats then layer_norm_apply on each block of rows, with the faults'
// policy (see those two for what each fault changes). x: (..., H, ...) -> y same shape.
// weight/bias: (H) or null. saved.mean, saved.rstd: (rows), written.
// y may be x (in place: a block's statistics are taken before its rows are written, and each
// element is read before it is overwritten). REQUIRES: shared_mean is non-null exactly when
// faults.combine_token_means.
template <typename T>
void layer_norm_forward(const Tensor<T>& x, const Tensor<T>* weight, const Tensor<T>* bias,
                        const LayerNormParams& params, const LayerNormFaults& faults, Tensor<T>& y,
                        LayerNormSaved<T>& saved, const T* shared_mean = nullptr);

// The dense oracle: the row kernel with the no-fault policy LayerNormFaults{}.
template <typename T>
void layer_norm_forward(const Tensor<T>& x, const Tensor<T>* weight, const Tensor<T>* bias,
                        const LayerNormParams& params, Tensor<T>& y, LayerNormSaved<T>& saved);

// Per-row mean and rstd of whole rows, the header's formula with the faults' pieces in place:
// centre (own mean, *shared_mean, or 0), variance divisor, rstd. stats.mean, stats.rstd: (rows),
// written. REQUIRES: shared_mean is non-null exactly when faults.combine_token_means.
template <typename T>
void layer_norm_stats(const Tensor<T>& x, const LayerNormParams& params,
                      const LayerNormFaults& faults, LayerNormSaved<T>& stats,
                      const T* shared_mean = nullptr);

// y = (((x - mean) * rstd) * w) + b on positions [0, valid) of every row, the normalized value
// passed through faults.round_normalized; positions >= valid are written 0. weight/bias: the
// (H) parameters, or this rank's (H_local) slices, or null. REQUIRES: y is not x.
template <typename T>
void layer_norm_apply(const Tensor<T>& x, const Tensor<T>* weight, const Tensor<T>* bias,
                      const LayerNormSaved<T>& stats, const LayerNormParams& params,
                      const LayerNormFaults& faults, std::int64_t valid, Tensor<T>& y);

// Activation grads are written (dx = ...); parameter grads accumulate (dweight += ...,
// dbias += ...), so one buffer can collect several contributions. dweight/dbias may be null.
// On each block of rows: the two reductions of layer_norm_backward_sums, then the elementwise
// pass of layer_norm_backward_apply, over whole rows.
template <typename T>
void layer_norm_backward(const Tensor<T>& dy, const Tensor<T>& x, const Tensor<T>* weight,
                         const LayerNormSaved<T>& saved, const LayerNormParams& params,
                         Tensor<T>& dx, Tensor<T>* dweight, Tensor<T>* dbias);

// The two row reductions of the backward, over [0, valid), row-sum order:
//   sum_dnorm = sum_i dnorm_i,  sum_dnorm_norm = sum_i dnorm_i * norm_i,
// with norm_i = (x_i - mean) * rstd and dnorm_i = dy_i * w_i (dy_i without weight).
// sum_dnorm, sum_dnorm_norm: (rows), written.
template <typename T>
void layer_norm_backward_sums(const Tensor<T>& dy, const Tensor<T>& x, const Tensor<T>* weight,
                              const LayerNormSaved<T>& stats, const LayerNormParams& params,
                              std::int64_t valid, Tensor<T>& sum_dnorm, Tensor<T>& sum_dnorm_norm);

// Given the full-row reductions (summed over every shard of the row) and the full row length
// `count`, writes dx on [0, valid) (0 elsewhere) and accumulates dweight/dbias over the rows in
// ascending row order:
//   dx_i = ((dnorm_i - sum_dnorm / count) - norm_i * (sum_dnorm_norm / count)) * rstd.
template <typename T>
void layer_norm_backward_apply(const Tensor<T>& dy, const Tensor<T>& x, const Tensor<T>* weight,
                               const LayerNormSaved<T>& stats, const Tensor<T>& sum_dnorm,
                               const Tensor<T>& sum_dnorm_norm, std::int64_t count,
                               const LayerNormParams& params, std::int64_t valid, Tensor<T>& dx,
                               Tensor<T>* dweight, Tensor<T>* dbias);

// ---- Building blocks for a row split over ranks (hidden-sharded plans) ----

// Per row: sum = sum_i x_i and sum_sq = sum_i x_i^2 over i in [0, valid), row-sum order.
// sum, sum_sq: (rows), written. REQUIRES: 0 <= valid <= extent of axis.
template <typename T>
void layer_norm_partial_sums(const Tensor<T>& x, const LayerNormParams& params, std::int64_t valid,
                             Tensor<T>& sum, Tensor<T>& sum_sq);

// One shard's Welford triple per row over [0, valid): count = valid, mean = sum / count (0 when
// count is 0), m2 = sum_i (x_i - mean)^2 (two-pass, row-sum order). mean, m2: (rows), written.
template <typename T>
void layer_norm_partial_moments(const Tensor<T>& x, const LayerNormParams& params,
                                std::int64_t valid, Tensor<T>& mean, Tensor<T>& m2);

// Chan, Golub, LeVeque (1979), "Updating formulae and a pairwise algorithm for computing sample
// variances": merges (count_a, mean_a, m2_a) with (count_b, mean_b, m2_b) into a:
//   n = n_a + n_b,  delta = mean_b - mean_a,
//   mean = mean_a + delta * (n_b / n),  m2 = (m2_a + m2_b) + delta^2 * (n_a * n_b / n).
// An empty side leaves the other unchanged, bit for bit.
template <typename T>
void welford_merge(T& count_a, T& mean_a, T& m2_a, const T& count_b, const T& mean_b,
                   const T& m2_b);

}  // namespace shardsim
