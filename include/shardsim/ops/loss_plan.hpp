// Sharded plan for the masked MSE loss: local sums and local valid-token counts are all-reduced,
// and the division by the global valid-token count happens once, on every rank alike.
#pragma once

#include <string>

#include "shardsim/ops/loss.hpp"
#include "shardsim/world.hpp"

namespace shardsim {

// Seeded bugs, switched on by scenario faults. They change the sharded plan only.
struct LossFaults {
  bool averaged_twice = false;         // also divides by the world size
  bool padding_in_loss = false;        // ignores valid_lengths
  bool average_of_rank_means = false;  // mean over ranks of each rank's own mean
};

template <typename T>
struct LossShardedSaved {
  // What backward divides by on each rank (V, or the faulty substitute).
  std::vector<T> divisor;
};

inline LocalFrame frame_of(const Shape& global, const Placement& placement, int ranks, int rank) {
  if (!placement.is_shard()) return {};
  const Slice slice = rank_slice(global, placement, ranks, rank);
  return {placement.axis, slice.begin, slice.valid()};
}

// y, target: same global shape and placement (Replicate, or Shard on the batch or seq axis).
// Returns the loss, shape [] Replicate.
template <typename T>
DistTensor<T> masked_mse_sharded(const World<T>& world, const DistTensor<T>& y,
                                 const DistTensor<T>& target, MaskedMseParams params,
                                 const LossFaults& faults, const std::string& output,
                                 LossShardedSaved<T>& saved) {
  const int ranks = world.size();
  if (faults.padding_in_loss) params.valid_lengths.clear();
  const Shape scalar;
  const std::vector<std::string> inputs{y.name, target.name};
  saved.divisor.assign(static_cast<std::size_t>(ranks), T(0));
  DistTensor<T> loss = make_dist<T>(output, scalar, Placement::replicate(), ranks);

  if (y.placement.is_replicate()) {
    // Every rank holds every token: each computes the whole loss, no collective needed.
    world.for_each_rank([&](int r) {
      T sum;
      std::int64_t count = 0;
      masked_mse_partial(y.local(r), target.local(r), params, LocalFrame{}, sum, count);
      saved.divisor[static_cast<std::size_t>(r)] = T(count);
      loss.local(r)[0] = sum / T(count);
    });
    world.record({.op = "mse_loss", .tensor = output, .exact = true, .inputs = inputs}, loss);
    return loss;
  }

  DistTensor<T> sums = make_dist<T>(output + ".sum", scalar, Placement::partial(), ranks);
  DistTensor<T> counts =
      make_dist<T>(output + ".valid_tokens", scalar, Placement::partial(), ranks);
  world.for_each_rank([&](int r) {
    std::int64_t count = 0;
    masked_mse_partial(y.local(r), target.local(r), params,
                       frame_of(y.global, y.placement, ranks, r), sums.local(r)[0], count);
    counts.local(r)[0] = T(count);
    if (faults.average_of_rank_means) {
      // The bug: each rank divides by its own count, then the ranks' means are averaged.
      sums.local(r)[0] = count > 0 ? T(sums.local(r)[0] / T(count)) : T(0);
    }
  });
  const DistTensor<T> total =
      world.all_reduce(sums, {.op = "all_reduce", .tensor = sums.name, .inputs = inputs});
  const DistTensor<T> valid = world.all_reduce(
      counts, {.op = "all_reduce", .tensor = counts.name, .exact = true, .inputs = inputs});
  world.for_each_rank([&](int r) {
    T divisor = valid.local(r)[0];
    if (faults.average_of_rank_means) divisor = T(ranks);
    if (faults.averaged_twice) divisor = divisor * T(ranks);
    saved.divisor[static_cast<std::size_t>(r)] = divisor;
    loss.local(r)[0] = total.local(r)[0] / divisor;
  });
  world.record({.op = "mse_loss", .tensor = output, .inputs = {total.name, valid.name}}, loss);
  return loss;
}

// grad(y) = 2 (y - target) / divisor on valid tokens; same placement as y. The caller records it.
template <typename T>
DistTensor<T> masked_mse_backward_sharded(const World<T>& world, const DistTensor<T>& y,
                                          const DistTensor<T>& target, MaskedMseParams params,
                                          const LossFaults& faults,
                                          const LossShardedSaved<T>& saved,
                                          const std::string& output) {
  const int ranks = world.size();
  if (faults.padding_in_loss) params.valid_lengths.clear();
  DistTensor<T> dy = make_dist<T>(output, y.global, y.placement, ranks);
  world.for_each_rank([&](int r) {
    T divisor = saved.divisor[static_cast<std::size_t>(r)];
    if (faults.average_of_rank_means) {
      // d/dy of mean_r(S_r / V_r) is 2 (y - t) / (V_r * k).
      std::int64_t local_count = 0;
      T unused;
      masked_mse_partial(y.local(r), target.local(r), params,
                         frame_of(y.global, y.placement, ranks, r), unused, local_count);
      divisor = T(local_count) * T(ranks);
    }
    masked_mse_backward(y.local(r), target.local(r), params,
                        frame_of(y.global, y.placement, ranks, r), divisor, dy.local(r));
  });
  return dy;
}

}  // namespace shardsim
