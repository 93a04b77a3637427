// Hidden-sharded LayerNorm: the input is Shard(axis) on the normalized axis, so no rank holds a
// whole row and the row statistics must be distributed. Three selectable plans (step key
// `stats`), each compared with the dense oracle:
//
//   sum_sumsq     each rank sums x and x^2 over its slice of every row; both are all-reduced;
//                 mean = S / H, var = max(SS / H - mean^2, 0), rstd = 1 / sqrt(var + eps).
//                 CANCELLATION RISK: SS / H and mean^2 are both about mean^2 when |mean| >> std,
//                 so their difference loses about 2 log2(|mean| / std) bits. In f32 with
//                 mean 1e4 and std 1 the two terms are ~1e8, whose ulp is 8: the variance (1) is
//                 pure rounding noise, possibly 0 or negative (hence the clamp). The two-pass
//                 dense oracle and the welford plan do not have this problem.
//   welford       each rank forms (count, mean, M2) of its slice (two-pass), the triples are
//                 all-gathered ("<out>.moments", [rows..., shard=k, moment=3]) and every rank
//                 merges them in rank order 0, 1, ..., k-1 with Chan et al.'s formula
//                 (welford_merge), identically; var = M2 / H.
//   redistribute  all-to-all Shard(axis) -> Shard(token_axis), gather weight and bias, the
//                 row-sharded plan (bitwise the dense arithmetic), all-to-all back. Moving data
//                 is exact, so every boundary of this plan claims exactness.
//
// Placements: weight and bias are Shard(axis) with the input's split; each rank holds the slice
// matching its features. Their gradients then need a reduction over tokens only, and every rank
// holds all tokens of its features, so sum_sumsq and welford produce dweight/dbias as
// Shard(axis) with no cross-rank sum (dbias is the dense row-order sum of dy: exact). The
// redistribute plan produces Partial(sum) shares over its token slices; the runner
// reduce-scatters them to Shard(axis) before the update.
//
// Backward (sum_sumsq and welford): the two row reductions of the LayerNorm backward,
// sum(dnorm) and sum(dnorm * norm), are partial per rank and all-reduced
// ("grad(<out>).sum_dnorm", "grad(<out>).sum_dnorm_norm"); then each rank forms dx on its slice.
//
// Statistics that are summed across ranks are a reordered arithmetic: nothing of sum_sumsq or
// welford claims exactness; at mp<bits> they agree with the oracle to about 2^-(bits-16).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "shardsim/ops/layer_norm_plan.hpp"

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
  // sum_sumsq/welford: Replicate (rows); redistribute: Shard(token_axis) (rows);
  // hidden_shard_local_stats: each rank's own (wrong) statistics, labelled Replicate.
  LayerNormShardedSaved<T> stats;
  DistTensor<T> x_tokens;     // redistribute: x moved to Shard(token_axis)
  DistTensor<T> weight_full;  // redistribute: the gathered weight (empty name if none)
  DistTensor<T> bias_full;
};

namespace detail {

template <typename T>
std::vector<std::string> names_of(const DistTensor<T>& x, const DistTensor<T>* weight,
                                  const DistTensor<T>* bias) {
  std::vector<std::string> names{x.name};
  if (weight) names.push_back(weight->name);
  if (bias) names.push_back(bias->name);
  return names;
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
  SHARDSIM_ASSERT(x.placement.is_shard() && x.placement.axis == params.axis,
                  "hidden-sharded LayerNorm needs x sharded on the normalized axis");
  const int ranks = world.size();
  const std::int64_t count = x.global.extent(params.axis);
  const std::vector<Slice> slices = x.slices();
  const Shape stats_shape = x.global.without(params.axis);
  const std::vector<std::string> inputs = detail::names_of(x, weight, bias);
  auto local_of = [](const DistTensor<T>* t, int r) { return t ? &t->local(r) : nullptr; };

  if (mode == HiddenStats::redistribute && !faults.hidden_shard_local_stats) {
    const Placement tokens = Placement::shard(token_axis);
    const std::string x_tokens = x.name + "@" + token_axis;
    saved.x_tokens = world.all_to_all(
        x, tokens, {.tensor = x_tokens, .dense = x.name, .exact = true, .inputs = {x.name}});
    saved.x_tokens.name = x_tokens;
    auto gather = [&](const DistTensor<T>* param, DistTensor<T>& full) {
      if (!param) return;
      const std::string name = param->name + "@gathered";
      full = world.all_gather(
          *param, {.tensor = name, .dense = param->name, .exact = true, .inputs = {param->name}});
      full.name = name;
    };
    gather(weight, saved.weight_full);
    gather(bias, saved.bias_full);
    const DistTensor<T> y_tokens =
        layer_norm_row_sharded(world, saved.x_tokens, weight ? &saved.weight_full : nullptr,
                               bias ? &saved.bias_full : nullptr, params, output + "@" + token_axis,
                               saved.stats, faults, output);
    DistTensor<T> y = world.all_to_all(
        y_tokens, x.placement, {.tensor = output, .exact = true, .inputs = {y_tokens.name}});
    y.name = output;
    return y;
  }

  DistTensor<T> y = make_dist<T>(output, x.global, x.placement, ranks);
  LayerNormShardedSaved<T>& stats = saved.stats;
  stats.mean = make_dist<T>(output + ".mean", stats_shape, Placement::replicate(), ranks);
  stats.rstd = make_dist<T>(output + ".rstd", stats_shape, Placement::replicate(), ranks);
  if (faults.hidden_shard_local_stats) {
    // The bug: each rank normalizes its slice of a token with the slice's own statistics.
    world.for_each_rank([&](int r) {
      LayerNormSaved<T> local;
      layer_norm_forward(x.local(r), local_of(weight, r), local_of(bias, r), params, y.local(r),
                         local);
      stats.mean.local(r) = std::move(local.mean);
      stats.rstd.local(r) = std::move(local.rstd);
    });
  } else if (mode == HiddenStats::sum_sumsq) {
    DistTensor<T> sums = make_dist<T>(output + ".sum", stats_shape, Placement::partial(), ranks);
    DistTensor<T> sums_sq =
        make_dist<T>(output + ".sumsq", stats_shape, Placement::partial(), ranks);
    world.for_each_rank([&](int r) {
      layer_norm_partial_sums(x.local(r), params, slices[r].valid(), sums.local(r),
                              sums_sq.local(r));
    });
    const DistTensor<T> total =
        world.all_reduce(sums, {.op = "all_reduce", .tensor = sums.name, .inputs = {x.name}});
    const DistTensor<T> total_sq =
        world.all_reduce(sums_sq, {.op = "all_reduce", .tensor = sums_sq.name, .inputs = {x.name}});
    world.for_each_rank([&](int r) {
      const T n = T(count);
      for (std::int64_t row = 0; row < stats_shape.numel(); ++row) {
        const T mean = total.local(r)[row] / n;
        T var = total_sq.local(r)[row] / n - mean * mean;
        if (var < T(0)) var = T(0);  // cancellation can leave a tiny negative
        stats.mean.local(r)[row] = mean;
        stats.rstd.local(r)[row] =
            faults.rstd(faults.variance_from_biased(var, count), T(params.eps));
      }
    });
  } else {
    SHARDSIM_ASSERT(mode == HiddenStats::welford, "unhandled hidden statistics mode");
    std::vector<Axis> axes = stats_shape.axes();
    axes.push_back({"shard", ranks});
    axes.push_back({"moment", 3});  // count, mean, M2
    DistTensor<T> moments =
        make_dist<T>(output + ".moments", Shape(axes), Placement::shard("shard"), ranks);
    world.for_each_rank([&](int r) {
      Tensor<T> mean;
      Tensor<T> m2;
      layer_norm_partial_moments(x.local(r), params, slices[r].valid(), mean, m2);
      Tensor<T>& local = moments.local(r);  // [rows..., shard=1, moment=3]
      for (std::int64_t row = 0; row < mean.numel(); ++row) {
        local[row * 3 + 0] = T(slices[r].valid());
        local[row * 3 + 1] = mean[row];
        local[row * 3 + 2] = m2[row];
      }
    });
    const DistTensor<T> gathered = world.all_gather(
        moments,
        {.op = "all_gather", .tensor = moments.name, .inputs = {x.name}, .has_oracle = false});
    world.for_each_rank([&](int r) {
      const Tensor<T>& all = gathered.local(r);  // [rows..., shard=k, moment=3]
      for (std::int64_t row = 0; row < stats_shape.numel(); ++row) {
        const std::int64_t first = row * ranks * 3;
        T n = all[first];
        T mean = all[first + 1];
        T m2 = all[first + 2];
        for (int q = 1; q < ranks; ++q) {
          const std::int64_t at = first + static_cast<std::int64_t>(q) * 3;
          welford_merge(n, mean, m2, all[at], all[at + 1], all[at + 2]);
        }
        stats.mean.local(r)[row] = mean;
        stats.rstd.local(r)[row] =
            faults.rstd(faults.variance_from_biased(T(m2 / T(count)), count), T(params.eps));
      }
    });
  }
  if (!faults.hidden_shard_local_stats) {
    // These plans' faults act on the statistics; the normalization is the formula's.
    world.for_each_rank([&](int r) {
      const LayerNormSaved<T> local{stats.mean.local(r), stats.rstd.local(r)};
      layer_norm_apply(x.local(r), local_of(weight, r), local_of(bias, r), local, params,
                       LayerNormFaults{}, slices[r].valid(), y.local(r));
    });
  }
  zero_padding(y);
  world.compare_boundary({.op = "layer_norm", .tensor = stats.mean.name, .inputs = {x.name}},
                         stats.mean);
  world.compare_boundary({.op = "layer_norm", .tensor = stats.rstd.name, .inputs = {x.name}},
                         stats.rstd);
  world.compare_boundary({.op = "layer_norm", .tensor = output, .inputs = inputs}, y);
  return y;
}

// Backward of layer_norm_hidden_sharded. dy has x's placement. For the redistribute mode the
// moved-back dx is recorded as `dense_dx` (the oracle's contribution of this step to grad(x),
// which the caller stores beforehand); the other modes record the all-reduced row sums
// "<dy>.sum_dnorm" and "<dy>.sum_dnorm_norm". The caller records the returned gradients.
template <typename T>
LayerNormShardedGrads<T> layer_norm_hidden_sharded_backward(
    const World<T>& world, const DistTensor<T>& dy, const DistTensor<T>& x,
    const DistTensor<T>* weight, const DistTensor<T>* bias, const LayerNormParams& params,
    HiddenStats mode, const std::string& token_axis, const LayerNormFaults& faults,
    const LayerNormHiddenSaved<T>& saved, const std::string& dx_name,
    const std::string& dweight_name, const std::string& dbias_name, const std::string& dense_dx) {
  const int ranks = world.size();
  const std::int64_t count = x.global.extent(params.axis);
  const std::vector<Slice> slices = x.slices();
  const Shape stats_shape = x.global.without(params.axis);
  auto local_of = [](const DistTensor<T>* t, int r) { return t ? &t->local(r) : nullptr; };

  if (mode == HiddenStats::redistribute && !faults.hidden_shard_local_stats) {
    const std::string dy_tokens_name = dy.name + "@" + token_axis;
    DistTensor<T> dy_tokens = world.all_to_all(
        dy, saved.x_tokens.placement,
        {.tensor = dy_tokens_name, .dense = dy.name, .exact = true, .inputs = {dy.name}});
    dy_tokens.name = dy_tokens_name;
    LayerNormShardedGrads<T> grads = layer_norm_row_sharded_backward(
        world, dy_tokens, saved.x_tokens, weight ? &saved.weight_full : nullptr,
        bias ? &saved.bias_full : nullptr, saved.stats, params, dx_name + "@" + token_axis,
        dweight_name, dbias_name);
    std::vector<std::string> inputs{dy_tokens_name, saved.x_tokens.name};
    if (weight) inputs.push_back(saved.weight_full.name);
    grads.dx = world.all_to_all(grads.dx, x.placement,
                                {.tensor = dense_dx, .exact = true, .inputs = inputs});
    grads.dx.name = dx_name;
    return grads;  // dweight/dbias: Partial(sum) over token slices
  }

  LayerNormShardedGrads<T> grads;
  grads.dx = make_dist<T>(dx_name, x.global, x.placement, ranks);
  if (weight) grads.dweight = make_dist<T>(dweight_name, weight->global, weight->placement, ranks);
  if (bias) grads.dbias = make_dist<T>(dbias_name, bias->global, bias->placement, ranks);
  auto stats_of = [&](int r) {
    return LayerNormSaved<T>{saved.stats.mean.local(r), saved.stats.rstd.local(r)};
  };
  if (faults.hidden_shard_local_stats) {
    // The plan believes its slice is the whole row: the kernel backward on the slice.
    world.for_each_rank([&](int r) {
      layer_norm_backward(dy.local(r), x.local(r), local_of(weight, r), stats_of(r), params,
                          grads.dx.local(r), weight ? &grads.dweight.local(r) : nullptr,
                          bias ? &grads.dbias.local(r) : nullptr);
    });
    zero_padding(grads.dx);
    return grads;
  }
  DistTensor<T> sum_dnorm =
      make_dist<T>(dy.name + ".sum_dnorm", stats_shape, Placement::partial(), ranks);
  DistTensor<T> sum_dnorm_norm =
      make_dist<T>(dy.name + ".sum_dnorm_norm", stats_shape, Placement::partial(), ranks);
  world.for_each_rank([&](int r) {
    layer_norm_backward_sums(dy.local(r), x.local(r), local_of(weight, r), stats_of(r), params,
                             slices[r].valid(), sum_dnorm.local(r), sum_dnorm_norm.local(r));
  });
  std::vector<std::string> inputs{x.name, dy.name};
  if (weight) inputs.push_back(weight->name);
  const DistTensor<T> total =
      world.all_reduce(sum_dnorm, {.op = "all_reduce", .tensor = sum_dnorm.name, .inputs = inputs});
  const DistTensor<T> total_norm = world.all_reduce(
      sum_dnorm_norm, {.op = "all_reduce", .tensor = sum_dnorm_norm.name, .inputs = inputs});
  world.for_each_rank([&](int r) {
    layer_norm_backward_apply(dy.local(r), x.local(r), local_of(weight, r), stats_of(r),
                              total.local(r), total_norm.local(r), count, params, slices[r].valid(),
                              grads.dx.local(r), weight ? &grads.dweight.local(r) : nullptr,
                              bias ? &grads.dbias.local(r) : nullptr);
  });
  zero_padding(grads.dx);
  return grads;
}

}  // namespace shardsim
