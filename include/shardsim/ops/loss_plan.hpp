// Sharded plan for the masked MSE loss: local sums and local valid-token counts are all-reduced,
// and the division by the global valid-token count happens once, on every rank alike.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shardsim/op_list.hpp"
#include "shardsim/ops/loss.hpp"
#include "shardsim/world.hpp"

namespace shardsim {

// The loss's named intermediates (boundaries and oracle tensors "OUTPUT.sum",
// "OUTPUT.valid_tokens").
namespace loss_parts {
inline constexpr std::string_view sum = "sum";
inline constexpr std::string_view valid_tokens = "valid_tokens";
}  // namespace loss_parts

// Seeded bugs, switched on by scenario faults. They change the sharded plan only.
struct LossFaults {
  bool averaged_twice = false;         // also divides by the world size
  bool padding_in_loss = false;        // ignores valid_lengths
  bool average_of_rank_means = false;  // mean over ranks of each rank's own mean
  bool wrong_axis = false;             // mask built in [seq, batch] order (see seq_major_mask)
  // fsdp_grad_local_mean: backward from each rank's own mean, S_r / V_r (the loss value stays
  // the global mean, as a program that all-reduces its loss for logging prints it).
  bool local_mean_backward = false;
};

// The wrong_axis bug: a [seq, batch] vs [batch, seq] convention mismatch in the loss mask. The
// activations are [batch, seq, ...], so token (b, s) is flat token t = b * S + s. The buggy plan
// builds its mask the Megatron way, laid out [seq, batch] (flat t' = s' * B + b', valid iff
// s' < valid_lengths[b']), and applies it to the flat token order unchanged: token (b, s) gets
// the mask bit of (s', b') = (t / B, t % B). Element counts agree, so nothing fails until a
// boundary depends on token identity: the masked loss sum. With every token valid the two masks
// coincide, so the bug needs padding (valid_lengths) to show.
inline std::vector<std::vector<std::uint8_t>> seq_major_mask(
    const std::vector<std::int64_t>& valid_lengths, std::int64_t batch, std::int64_t seq) {
  std::vector<std::vector<std::uint8_t>> mask(static_cast<std::size_t>(batch),
                                              std::vector<std::uint8_t>(seq, 1));
  if (valid_lengths.empty()) return mask;
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t s = 0; s < seq; ++s) {
      const std::int64_t t = b * seq + s;
      const std::int64_t believed_seq = t / batch;
      const std::int64_t believed_batch = t % batch;
      mask[static_cast<std::size_t>(b)][static_cast<std::size_t>(s)] =
          believed_seq < valid_lengths[static_cast<std::size_t>(believed_batch)] ? 1 : 0;
    }
  }
  return mask;
}

// The parameters the sharded plan actually uses: the scenario's, with the faults applied.
inline MaskedMseParams faulty_params(MaskedMseParams params, const LossFaults& faults,
                                     const Shape& global) {
  if (faults.padding_in_loss) params.valid_lengths.clear();
  if (faults.wrong_axis) {
    params.token_valid = seq_major_mask(params.valid_lengths, global.extent(params.batch_axis),
                                        global.extent(params.seq_axis));
  }
  return params;
}

// The number of distinct token shards: the product of the sizes of the dims that shard y.
template <typename T>
int token_holders(const DistTensor<T>& y) {
  int holders = 1;
  for (int d = 0; d < y.layout.ndim(); ++d) {
    if (y.layout.on(d).is_shard()) holders *= y.mesh->dim(d).size;
  }
  return holders;
}

template <typename T>
struct LossShardedSaved {
  // What backward divides by on each rank (V, or the faulty substitute).
  std::vector<T> divisor;
};

// Rank `rank`'s frame of y: its share of the batch and seq axes (every dim that shards them).
template <typename T>
LocalFrame frame_of(const DistTensor<T>& y, const MaskedMseParams& params, int rank) {
  LocalFrame frame;
  if (y.layout.shards(params.batch_axis)) {
    const Slice slice = y.slice(rank, params.batch_axis);
    frame.batch_begin = slice.begin;
    frame.batch_valid = slice.valid();
  }
  if (y.layout.shards(params.seq_axis)) {
    const Slice slice = y.slice(rank, params.seq_axis);
    frame.seq_begin = slice.begin;
    frame.seq_valid = slice.valid();
  }
  return frame;
}

// y, target: same global shape and layout (on every dim Replicate, or Shard on the batch or seq
// axis). Returns the loss, shape [] Replicate. The sums and counts are Partial on every dim that
// shards the tokens and are all-reduced over those dims in mesh-dim order; `ranks` below is
// the number of members that hold distinct tokens (the product of those dims' sizes), which
// the faults divide by.
template <typename T>
DistTensor<T> masked_mse_sharded(const World<T>& world, const DistTensor<T>& y,
                                 const DistTensor<T>& target, MaskedMseParams params,
                                 const LossFaults& faults, const std::string& output,
                                 LossShardedSaved<T>& saved) {
  params = faulty_params(std::move(params), faults, y.global);
  const Shape scalar;
  const std::vector<std::string> inputs{y.name, target.name};
  const Layout replicate = Layout::uniform(y.layout.ndim(), Placement::replicate());
  saved.divisor.assign(static_cast<std::size_t>(world.size()), T(0));
  DistTensor<T> loss = world.make(output, scalar, replicate);

  if (y.layout.is_replicate()) {
    // Every rank holds every token: each computes the whole loss, no collective needed.
    world.for_each_rank([&](int r) {
      T sum;
      std::int64_t count = 0;
      masked_mse_partial(y.local(r), target.local(r), params, LocalFrame{}, sum, count);
      saved.divisor[static_cast<std::size_t>(r)] = T(count);
      loss.local(r)[0] = sum / T(count);
    });
    world.compare_boundary(
        {.op = op_label(OpKind::mse_loss), .tensor = output, .exact = true, .inputs = inputs},
        loss);
    return loss;
  }

  Layout partial = replicate;
  for (int d = 0; d < y.layout.ndim(); ++d) {
    if (y.layout.on(d).is_shard()) partial.dims[d] = Placement::partial();
  }
  const int ranks = token_holders(y);
  DistTensor<T> sums = world.make(part_name(output, loss_parts::sum), scalar, partial);
  DistTensor<T> counts = world.make(part_name(output, loss_parts::valid_tokens), scalar, partial);
  world.for_each_rank([&](int r) {
    std::int64_t count = 0;
    masked_mse_partial(y.local(r), target.local(r), params, frame_of(y, params, r),
                       sums.local(r)[0], count);
    counts.local(r)[0] = T(count);
    if (faults.average_of_rank_means) {
      // The bug: each rank divides by its own count, then the ranks' means are averaged.
      sums.local(r)[0] = count > 0 ? T(sums.local(r)[0] / T(count)) : T(0);
    }
  });
  // On a Replicate dim every member holds the same addend (a copy); the Partial dims are summed
  // one after another, each in its own groups.
  DistTensor<T> total = sums;
  DistTensor<T> valid = counts;
  for (int d = 0; d < y.layout.ndim(); ++d) {
    if (!partial.on(d).is_partial()) continue;
    total =
        world.on(d).all_reduce(total, {.op = "all_reduce", .tensor = sums.name, .inputs = inputs});
    valid = world.on(d).all_reduce(
        valid, {.op = "all_reduce", .tensor = counts.name, .exact = true, .inputs = inputs});
  }
  world.for_each_rank([&](int r) {
    T divisor = valid.local(r)[0];
    if (faults.average_of_rank_means) divisor = T(ranks);
    if (faults.averaged_twice) divisor = divisor * T(ranks);
    saved.divisor[static_cast<std::size_t>(r)] = divisor;
    loss.local(r)[0] = total.local(r)[0] / divisor;
  });
  world.compare_boundary(
      {.op = op_label(OpKind::mse_loss), .tensor = output, .inputs = {total.name, valid.name}},
      loss);
  return loss;
}

// grad(y) = 2 (y - target) / divisor on valid tokens; same placement as y. The caller records it.
template <typename T>
DistTensor<T> masked_mse_backward_sharded(const World<T>& world, const DistTensor<T>& y,
                                          const DistTensor<T>& target, MaskedMseParams params,
                                          const LossFaults& faults,
                                          const LossShardedSaved<T>& saved,
                                          const std::string& output) {
  const int ranks = token_holders(y);
  params = faulty_params(std::move(params), faults, y.global);
  DistTensor<T> dy = world.make(output, y.global, y.layout);
  world.for_each_rank([&](int r) {
    T divisor = saved.divisor[static_cast<std::size_t>(r)];
    if (faults.local_mean_backward) {
      // d/dy of S_r / V_r is 2 (y - t) / V_r: V_r = this rank's own valid tokens.
      std::int64_t local_count = 0;
      T unused;
      masked_mse_partial(y.local(r), target.local(r), params, frame_of(y, params, r), unused,
                         local_count);
      divisor = T(local_count);
    }
    if (faults.average_of_rank_means) {
      // d/dy of mean_r(S_r / V_r) is 2 (y - t) / (V_r * k).
      std::int64_t local_count = 0;
      T unused;
      masked_mse_partial(y.local(r), target.local(r), params, frame_of(y, params, r), unused,
                         local_count);
      divisor = T(local_count) * T(ranks);
    }
    masked_mse_backward(y.local(r), target.local(r), params, frame_of(y, params, r), divisor,
                        dy.local(r));
  });
  return dy;
}

}  // namespace shardsim
