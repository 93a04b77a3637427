// Sharded plans for LayerNorm. A plan runs the per-rank kernel inside the world's local phases
// and reaches other ranks only through the world's collectives.
#pragma once

#include <string>

#include "shardsim/ops/layer_norm.hpp"
#include "shardsim/world.hpp"

namespace shardsim {

template <typename T>
struct LayerNormShardedSaved {
  DistTensor<T> mean;  // x.global without axis, same placement as x
  DistTensor<T> rstd;
};

// Token-sharded LayerNorm: every rank owns whole rows, so each normalizes its own rows with
// local statistics. No collective. Same arithmetic as the dense oracle, so y, mean and rstd are
// recorded as exact boundaries.
// REQUIRES: x is Replicate or Shard on an axis other than params.axis; weight/bias Replicate.
template <typename T>
DistTensor<T> layer_norm_row_sharded(const World<T>& world, const DistTensor<T>& x,
                                     const DistTensor<T>* weight, const DistTensor<T>* bias,
                                     const LayerNormParams& params, const std::string& output,
                                     LayerNormShardedSaved<T>& saved) {
  SHARDSIM_ASSERT(!x.placement.is_partial() &&
                      !(x.placement.is_shard() && x.placement.axis == params.axis),
                  "row-sharded LayerNorm needs whole rows on every rank");
  const int ranks = world.size();
  const Shape stats_shape = x.global.without(params.axis);
  DistTensor<T> y = make_dist<T>(output, x.global, x.placement, ranks);
  saved.mean = make_dist<T>(output + ".mean", stats_shape, x.placement, ranks);
  saved.rstd = make_dist<T>(output + ".rstd", stats_shape, x.placement, ranks);
  world.for_each_rank([&](int r) {
    LayerNormSaved<T> local;
    layer_norm_forward(x.local(r), weight ? &weight->local(r) : nullptr,
                       bias ? &bias->local(r) : nullptr, params, y.local(r), local);
    saved.mean.local(r) = std::move(local.mean);
    saved.rstd.local(r) = std::move(local.rstd);
  });
  zero_padding(y);
  zero_padding(saved.mean);
  zero_padding(saved.rstd);
  std::vector<std::string> inputs{x.name};
  if (weight) inputs.push_back(weight->name);
  if (bias) inputs.push_back(bias->name);
  world.record({.op = "layer_norm", .tensor = saved.mean.name, .exact = true, .inputs = {x.name}},
               saved.mean);
  world.record({.op = "layer_norm", .tensor = saved.rstd.name, .exact = true, .inputs = {x.name}},
               saved.rstd);
  world.record({.op = "layer_norm", .tensor = output, .exact = true, .inputs = inputs}, y);
  return y;
}

}  // namespace shardsim
