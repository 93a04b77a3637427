// The forward of the hidden-sharded LayerNorm plans (layer_norm_hidden_plan.hpp has the
// overview): the statistics modes, and the normalization of each rank's slice given them.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/world.hpp"
#include "ops/layer_norm/layer_norm.hpp"
#include "ops/layer_norm/layer_norm_faults.hpp"
#include "ops/layer_norm/layer_norm_plan.hpp"
#include "ops/op_list.hpp"

namespace shardsim {

enum class HiddenStats { sum_sumsq, welford, redistribute };

// REQUIRES: name is one of "sum_sumsq", "welford", "redistribute" (the loader checks).
inline HiddenStats parse_hidden_stats(std::string_view name) {
  if (name == "sum_sumsq") return HiddenStats::sum_sumsq;
  if (name == "welford") return HiddenStats::welford;
  SHARDSIM_ASSERT(name == "redistribute", "unknown hidden-sharded statistics mode");
  return HiddenStats::redistribute;
}

template <typename T>
struct LayerNormHiddenSaved {
  // (rows) sum_sumsq/welford: Replicate; redistribute: Shard(token_axis);
  // hidden_shard_local_stats: each rank's own (wrong) statistics, labelled Replicate.
  LayerNormShardedSaved<T> stats;
  DistTensor<T> x_tokens;     // redistribute: x moved to Shard(token_axis), x.global
  DistTensor<T> weight_full;  // redistribute: the gathered (H) weight (empty name if none)
  DistTensor<T> bias_full;    // redistribute: the gathered (H) bias (empty name if none)
};

namespace detail {

// sum_sumsq: the all-reduced partial sums S and SS of every row give
// mean = S / H and var = max(SS / H - mean^2, 0); rstd by the faults' policy.
// Fills stats.mean and stats.rstd (Replicate, (rows)) on every rank.
template <typename T>
void hidden_stats_sum_sumsq(const World<T>& world, const DistTensor<T>& x,
                            const LayerNormParams& params, const LayerNormFaults& faults,
                            const std::string& output, LayerNormShardedSaved<T>& stats) {
  const std::int64_t count = x.global.extent(params.axis);
  const Shape stats_shape = x.global.without(params.axis);  // (rows)
  // (rows), Partial: each rank's sums over its slice of every row.
  DistTensor<T> sums = world.make(part_name(output, layer_norm_parts::sum), stats_shape,
                                  x.layout.with(world.dim(), Placement::partial()));
  DistTensor<T> sums_sq = world.make(part_name(output, layer_norm_parts::sum_sq), stats_shape,
                                     x.layout.with(world.dim(), Placement::partial()));
  world.for_each_rank([&](int r) {
    layer_norm_partial_sums(x.local(r), params, x.slice(r, params.axis).valid(), sums.local(r),
                            sums_sq.local(r));
  });
  // (rows), Replicate: the full-row sums.
  const DistTensor<T> total =
      world.all_reduce(sums, {.op = "all_reduce", .tensor = sums.name, .inputs = {x.name}});
  const DistTensor<T> total_sq =
      world.all_reduce(sums_sq, {.op = "all_reduce", .tensor = sums_sq.name, .inputs = {x.name}});
  world.for_each_rank([&](int r) {
    const T row_length = T(count);
    // This rank's rows: every row on the group's dim, only its own where another mesh dim shards
    // them (a dp rank's batch rows).
    for (std::int64_t row = 0; row < total.local(r).numel(); ++row) {
      const T mean = total.local(r)[row] / row_length;
      T var = total_sq.local(r)[row] / row_length - mean * mean;
      if (var < T(0)) var = T(0);  // cancellation can leave a tiny negative
      stats.mean.local(r)[row] = mean;
      stats.rstd.local(r)[row] =
          faults.rstd(faults.variance_from_biased(var, count), T(params.eps));
    }
  });
}

// welford: every rank's (count, mean, M2) per row, all-gathered and merged in rank order with
// welford_merge; var = M2 / H, rstd by the faults' policy. Fills stats.mean and stats.rstd
// (Replicate, (rows)) on every rank.
template <typename T>
void hidden_stats_welford(const World<T>& world, const DistTensor<T>& x,
                          const LayerNormParams& params, const LayerNormFaults& faults,
                          const std::string& output, LayerNormShardedSaved<T>& stats) {
  const int ranks = world.group_size();
  const std::int64_t count = x.global.extent(params.axis);
  const Shape stats_shape = x.global.without(params.axis);  // (rows)
  std::vector<Axis> axes = stats_shape.axes();
  axes.push_back({"shard", ranks});
  axes.push_back({"moment", 3});  // count, mean, M2
  // (rows..., shard=k, moment=3), Shard(shard): each rank's triple is its shard=1 slice.
  DistTensor<T> moments = world.make(part_name(output, layer_norm_parts::moments), Shape(axes),
                                     x.layout.with(world.dim(), Placement::shard("shard")));
  world.for_each_rank([&](int r) {
    Tensor<T> mean;  // (rows) of this rank's slice
    Tensor<T> m2;    // (rows)
    layer_norm_partial_moments(x.local(r), params, x.slice(r, params.axis).valid(), mean, m2);
    Tensor<T>& local = moments.local(r);  // (rows..., shard=1, moment=3)
    for (std::int64_t row = 0; row < mean.numel(); ++row) {
      local[row * 3 + 0] = T(x.slice(r, params.axis).valid());
      local[row * 3 + 1] = mean[row];
      local[row * 3 + 2] = m2[row];
    }
  });
  // (rows..., shard=k, moment=3), Replicate.
  const DistTensor<T> gathered = world.all_gather(
      moments,
      {.op = "all_gather", .tensor = moments.name, .inputs = {x.name}, .has_oracle = false});
  world.for_each_rank([&](int r) {
    const Tensor<T>& all = gathered.local(r);  // (rows..., shard=k, moment=3)
    // This rank's rows (another mesh dim may shard them), k triples each.
    for (std::int64_t row = 0; row < stats.mean.local(r).numel(); ++row) {
      const std::int64_t first = row * ranks * 3;
      // The triples of shards 0, 1, ..., k-1 merged in that order into shard 0's.
      T merged_count = all[first];
      T merged_mean = all[first + 1];
      T merged_m2 = all[first + 2];
      for (int shard = 1; shard < ranks; ++shard) {
        const std::int64_t at = first + static_cast<std::int64_t>(shard) * 3;
        welford_merge(merged_count, merged_mean, merged_m2, all[at], all[at + 1], all[at + 2]);
      }
      stats.mean.local(r)[row] = merged_mean;
      stats.rstd.local(r)[row] =
          faults.rstd(faults.variance_from_biased(T(merged_m2 / T(count)), count), T(params.eps));
    }
  });
}

// redistribute: x to Shard(token_axis), weight and bias gathered, the row-sharded plan (with the
// row-plan faults), y back to x's placement.
template <typename T>
DistTensor<T> hidden_forward_redistribute(const World<T>& world, const DistTensor<T>& x,
                                          const DistTensor<T>* weight, const DistTensor<T>* bias,
                                          const LayerNormParams& params,
                                          const std::string& token_axis,
                                          const LayerNormFaults& faults, const std::string& output,
                                          LayerNormHiddenSaved<T>& saved) {
  const std::string x_tokens = moved_name(x.name, token_axis);
  saved.x_tokens =
      world.all_to_all(x, Placement::shard(token_axis),
                       {.tensor = x_tokens, .dense = x.name, .exact = true, .inputs = {x.name}});
  saved.x_tokens.name = x_tokens;
  auto gather = [&](const DistTensor<T>* param, DistTensor<T>& full) {
    if (!param) return;
    const std::string name = moved_name(param->name, layer_norm_parts::gathered);
    full = world.all_gather(
        *param, {.tensor = name, .dense = param->name, .exact = true, .inputs = {param->name}});
    full.name = name;
  };
  gather(weight, saved.weight_full);
  gather(bias, saved.bias_full);
  // x.global, Shard(token_axis): the row-sharded plan's output.
  const DistTensor<T> y_tokens =
      layer_norm_row_sharded(world, saved.x_tokens, weight ? &saved.weight_full : nullptr,
                             bias ? &saved.bias_full : nullptr, params,
                             moved_name(output, token_axis), saved.stats, faults, output);
  // x.global, x's placement.
  DistTensor<T> y = world.all_to_all(y_tokens, world.placement(x),
                                     {.tensor = output,
                                      .exact = true,
                                      .inputs = {y_tokens.name},
                                      .stored = params.store.has_value()});
  y.name = output;
  return y;
}

}  // namespace detail

// REQUIRES: x is Shard(params.axis); weight/bias (optional) Shard(params.axis) with x's split;
// token_axis is another axis of x (used by the redistribute mode only).
template <typename T>
DistTensor<T> layer_norm_hidden_sharded(const World<T>& world, const DistTensor<T>& x,
                                        const DistTensor<T>* weight, const DistTensor<T>* bias,
                                        const LayerNormParams& params, HiddenStats mode,
                                        const std::string& token_axis,
                                        const LayerNormFaults& faults, const std::string& output,
                                        LayerNormHiddenSaved<T>& saved) {
  SHARDSIM_ASSERT(world.placement(x).is_shard() && world.placement(x).axis == params.axis,
                  "hidden-sharded LayerNorm needs x sharded on the normalized axis");
  if (mode == HiddenStats::redistribute && !faults.hidden_shard_local_stats) {
    return detail::hidden_forward_redistribute(world, x, weight, bias, params, token_axis, faults,
                                               output, saved);
  }
  const Shape stats_shape = x.global.without(params.axis);  // (rows)
  auto local_of = [](const DistTensor<T>* t, int r) { return t ? &t->local(r) : nullptr; };
  DistTensor<T> y = world.make(output, x.global, x.layout);  // x's placement
  LayerNormShardedSaved<T>& stats = saved.stats;             // (rows), Replicate
  stats.mean = world.make(part_name(output, layer_norm_parts::mean), stats_shape,
                          x.layout.with(world.dim(), Placement::replicate()));
  stats.rstd = world.make(part_name(output, layer_norm_parts::rstd), stats_shape,
                          x.layout.with(world.dim(), Placement::replicate()));
  if (faults.hidden_shard_local_stats) {
    // The bug: each rank normalizes its slice of a token with the slice's own statistics.
    world.for_each_rank([&](int r) {
      LayerNormSaved<T> local;  // (rows) of the slice
      layer_norm_forward(x.local(r), local_of(weight, r), local_of(bias, r), params, y.local(r),
                         local);
      stats.mean.local(r) = std::move(local.mean);
      stats.rstd.local(r) = std::move(local.rstd);
    });
  } else {
    switch (mode) {
      case HiddenStats::sum_sumsq:
        detail::hidden_stats_sum_sumsq(world, x, params, faults, output, stats);
        break;
      case HiddenStats::welford:
        detail::hidden_stats_welford(world, x, params, faults, output, stats);
        break;
      case HiddenStats::redistribute:
        SHARDSIM_ASSERT(false, "redistribute runs the row-sharded plan");
        break;
    }
    // These plans' faults act on the statistics; the normalization is the formula's.
    world.for_each_rank([&](int r) {
      const LayerNormSaved<T> local{stats.mean.local(r), stats.rstd.local(r)};  // (rows)
      layer_norm_apply(x.local(r), local_of(weight, r), local_of(bias, r), local, params,
                       LayerNormFaults{}, x.slice(r, params.axis).valid(), y.local(r));
    });
  }
  zero_padding(y);
  world.compare_boundary(
      {.op = op_label(OpKind::layer_norm), .tensor = stats.mean.name, .inputs = {x.name}},
      stats.mean);
  world.compare_boundary(
      {.op = op_label(OpKind::layer_norm), .tensor = stats.rstd.name, .inputs = {x.name}},
      stats.rstd);
  world.compare_boundary({.op = op_label(OpKind::layer_norm),
                          .tensor = output,
                          .inputs = detail::layer_norm_input_names(x, weight, bias),
                          .stored = params.store.has_value()},
                         y);
  return y;
}

}  // namespace shardsim
