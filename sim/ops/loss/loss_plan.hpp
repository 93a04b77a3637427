// Sharded plan for the masked MSE loss: local sums and local valid-token counts are all-reduced,
// and the division by the global valid-token count happens once, on every rank alike.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/world.hpp"
#include "ops/loss/loss.hpp"
#include "ops/op_list.hpp"

namespace shardsim {

// The loss's named intermediates (boundaries and oracle tensors "OUTPUT.sum",
// "OUTPUT.valid_tokens").
namespace loss_parts {
inline constexpr std::string_view sum = "sum";
inline constexpr std::string_view valid_tokens = "valid_tokens";
inline constexpr std::string_view step_valid_tokens = "step_valid_tokens";  // micro-batches only
}  // namespace loss_parts

// Gradient accumulation: the loss call of one micro-batch of a training step. Its rows are
// global batch rows [batch_begin, batch_begin + rows[index - 1]); the correct plan divides its
// sum by the valid tokens of the whole step (every micro-batch, every rank), so that the summed
// micro-batch gradients are the whole batch's gradient. index 0: no micro-batches.
struct MicroTokens {
  int index = 0;
  std::int64_t batch_begin = 0;
  std::vector<std::int64_t> rows;  // every micro-batch's row count, in order

  int count() const { return static_cast<int>(rows.size()); }
};

// Seeded bugs, switched on by scenario faults. They change the sharded plan only.
struct LossFaults {
  bool averaged_twice = false;         // also divides by the world size
  bool padding_in_loss = false;        // ignores valid_lengths
  bool average_of_rank_means = false;  // mean over ranks of each rank's own mean
  bool wrong_axis = false;             // mask built in [seq, batch] order (see seq_major_mask)
  // Micro-batches: each micro-batch's loss is its own mean (its sum over its own valid tokens),
  // divided by the number of micro-batches, as naive accumulation code does
  // (loss = criterion(micro) / k). Equal to the correct S_j / V only when every micro-batch
  // holds V / k valid tokens.
  bool micro_batch_mean = false;
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
  std::int64_t batch_begin = 0;  // MicroTokens::batch_begin of the forward
  Shape mask_shape;              // mask_shape() of the forward
};

// Rank `rank`'s frame of a tensor of global shape `global` laid out as `layout`: its share of
// the batch and seq axes (every dim that shards them); batch rows are offset by `batch_begin`
// (the first global row of a micro-batch).
inline LocalFrame frame_of(const Shape& global, const Layout& layout, const Mesh& mesh,
                           const MaskedMseParams& params, int rank, std::int64_t batch_begin) {
  LocalFrame frame;
  frame.batch_begin = batch_begin;
  if (layout.shards(params.batch_axis)) {
    frame.batch = axis_slice(global, layout, mesh, rank, params.batch_axis);
  }
  if (layout.shards(params.seq_axis)) {
    frame.seq = axis_slice(global, layout, mesh, rank, params.seq_axis);
  }
  return frame;
}

template <typename T>
LocalFrame frame_of(const DistTensor<T>& y, const MaskedMseParams& params, int rank,
                    std::int64_t batch_begin = 0) {
  return frame_of(y.global, y.layout, *y.mesh, params, rank, batch_begin);
}

// Micro-batches: the valid tokens rank `rank` holds in the whole step, every micro-batch laid
// out as y is (each rank reads the masks of its own rows, as a data loader does before the
// accumulation loop).
template <typename T>
std::int64_t step_valid_tokens(const DistTensor<T>& y, const MaskedMseParams& params,
                               const MicroTokens& micro, int rank) {
  std::int64_t count = 0;
  std::int64_t begin = 0;
  for (std::int64_t rows : micro.rows) {
    const Shape global = y.global.with_extent(params.batch_axis, rows);
    const LocalFrame frame = frame_of(global, y.layout, *y.mesh, params, rank, begin);
    count += masked_valid_tokens(local_shape(global, y.layout, *y.mesh, rank), params, frame);
    begin += rows;
  }
  return count;
}

// The divisor of one rank's summed loss: the valid tokens of this loss call (`valid`), or with
// micro-batches those of the whole step (`step_valid`); the faults substitute theirs.
template <typename T>
T loss_divisor(const T& valid, const T& step_valid, const MicroTokens& micro,
               const LossFaults& faults, int ranks) {
  T divisor = micro.index > 0 ? step_valid : valid;
  if (micro.index > 0 && faults.micro_batch_mean) divisor = valid * T(micro.count());
  if (faults.average_of_rank_means) divisor = T(ranks);
  if (faults.averaged_twice) divisor = divisor * T(ranks);
  return divisor;
}

// The global shape the loss's mask is laid over: y's, or with micro-batches the whole step's
// (the wrong_axis mask is built over every row of the batch).
template <typename T>
Shape mask_shape(const DistTensor<T>& y, const MaskedMseParams& params, const MicroTokens& micro) {
  if (micro.index == 0) return y.global;
  std::int64_t rows = 0;
  for (std::int64_t r : micro.rows) rows += r;
  return y.global.with_extent(params.batch_axis, rows);
}

// Micro-batches: the valid tokens of the whole step on every rank. Each rank counts its tokens
// of every micro-batch (step_valid_tokens); the counts are all-reduced over the Partial dims of
// `partial` (those that shard the tokens), recorded as "OUT.step_valid_tokens".
template <typename T>
DistTensor<T> step_valid_sharded(const World<T>& world, const DistTensor<T>& y,
                                 const MaskedMseParams& params, const MicroTokens& micro,
                                 const Layout& partial, const std::string& output,
                                 const std::vector<std::string>& inputs) {
  DistTensor<T> step =
      world.make(part_name(output, loss_parts::step_valid_tokens), Shape(), partial);
  world.for_each_rank([&](int r) { step.local(r)[0] = T(step_valid_tokens(y, params, micro, r)); });
  const std::string name = step.name;
  for (int d = 0; d < partial.ndim(); ++d) {
    if (!partial.on(d).is_partial()) continue;
    step = world.on(d).all_reduce(
        step, {.op = "all_reduce", .tensor = name, .exact = true, .inputs = inputs});
  }
  return step;
}

// The divisor of a summed loss without the rank faults: this call's valid tokens, or with
// micro-batches the whole step's (micro_batch_mean: this call's times the micro-batch count).
template <typename T>
T micro_divisor(const T& valid, const T& step_valid, const MicroTokens& micro,
                const LossFaults& faults) {
  if (micro.index == 0) return valid;
  return faults.micro_batch_mean ? T(valid * T(micro.count())) : step_valid;
}

// Every rank holds every token (y Replicate on every dim): each computes the whole loss, no
// collective needed.
template <typename T>
DistTensor<T> masked_mse_replicated(const World<T>& world, const DistTensor<T>& y,
                                    const DistTensor<T>& target, const MaskedMseParams& params,
                                    const LossFaults& faults, const MicroTokens& micro,
                                    DistTensor<T> loss, LossShardedSaved<T>& saved) {
  world.for_each_rank([&](int r) {
    T sum;
    std::int64_t count = 0;
    const LocalFrame frame{.batch_begin = micro.batch_begin};
    masked_mse_partial(y.local(r), target.local(r), params, frame, sum, count);
    const T step = micro.index > 0 ? T(step_valid_tokens(y, params, micro, r)) : T(count);
    T divisor = micro_divisor(T(count), step, micro, faults);
    // The rank faults as the sharded plan has them, with one holder of the tokens: the mean of
    // the holders' own means is this call's mean, S / (its valid tokens), which with
    // micro-batches differs from S / (the step's); averaging twice divides by the one holder.
    // The backward divides as the forward did (masked_mse_backward_sharded).
    if (faults.average_of_rank_means) divisor = count > 0 ? T(count) : T(1);  // S = 0 then
    saved.divisor[static_cast<std::size_t>(r)] = divisor;
    loss.local(r)[0] = sum / divisor;
  });
  world.compare_boundary({.op = op_label(OpKind::mse_loss),
                          .tensor = loss.name,
                          .exact = true,
                          .inputs = {y.name, target.name}},
                         loss);
  return loss;
}

// y, target: same global shape and layout (on every dim Replicate, or Shard on the batch or seq
// axis). Returns the loss, shape [] Replicate. The sums and counts are Partial on every dim that
// shards the tokens and are all-reduced over those dims in mesh-dim order; `ranks` below is
// the number of members that hold distinct tokens (the product of those dims' sizes), which
// the faults divide by. With micro-batches (micro.index > 0) y holds one micro-batch, and the
// divisor is the whole step's valid-token count (step_valid_sharded).
template <typename T>
DistTensor<T> masked_mse_sharded(const World<T>& world, const DistTensor<T>& y,
                                 const DistTensor<T>& target, MaskedMseParams params,
                                 const LossFaults& faults, const std::string& output,
                                 LossShardedSaved<T>& saved, const MicroTokens& micro = {}) {
  saved.mask_shape = mask_shape(y, params, micro);
  saved.batch_begin = micro.batch_begin;
  params = faulty_params(std::move(params), faults, saved.mask_shape);
  const Shape scalar;
  const std::vector<std::string> inputs{y.name, target.name};
  const Layout replicate = Layout::uniform(y.layout.ndim(), Placement::replicate());
  saved.divisor.assign(static_cast<std::size_t>(world.size()), T(0));
  DistTensor<T> loss = world.make(output, scalar, replicate);
  if (y.layout.is_replicate()) {
    return masked_mse_replicated(world, y, target, params, faults, micro, std::move(loss), saved);
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
    masked_mse_partial(y.local(r), target.local(r), params,
                       frame_of(y, params, r, micro.batch_begin), sums.local(r)[0], count);
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
  // The naive program (micro_batch_mean) never counts the step's tokens.
  const bool counts_step = micro.index > 0 && !faults.micro_batch_mean;
  const DistTensor<T> step =
      counts_step ? step_valid_sharded(world, y, params, micro, partial, output, inputs) : valid;
  world.for_each_rank([&](int r) {
    T divisor = micro_divisor(valid.local(r)[0], step.local(r)[0], micro, faults);
    if (faults.average_of_rank_means) divisor = T(ranks);
    if (faults.averaged_twice) divisor = divisor * T(ranks);
    saved.divisor[static_cast<std::size_t>(r)] = divisor;
    loss.local(r)[0] = total.local(r)[0] / divisor;
  });
  std::vector<std::string> from{total.name, valid.name};
  if (counts_step) from.push_back(step.name);
  world.compare_boundary({.op = op_label(OpKind::mse_loss), .tensor = output, .inputs = from},
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
  params = faulty_params(std::move(params), faults, saved.mask_shape);
  DistTensor<T> dy = world.make(output, y.global, y.layout);
  world.for_each_rank([&](int r) {
    T divisor = saved.divisor[static_cast<std::size_t>(r)];
    const LocalFrame frame = frame_of(y, params, r, saved.batch_begin);
    if (faults.local_mean_backward) {
      // d/dy of S_r / V_r is 2 (y - t) / V_r: V_r = this rank's own valid tokens.
      std::int64_t local_count = 0;
      T unused;
      masked_mse_partial(y.local(r), target.local(r), params, frame, unused, local_count);
      divisor = T(local_count);
    }
    if (faults.average_of_rank_means) {
      // d/dy of mean_r(S_r / V_r) is 2 (y - t) / (V_r * k).
      std::int64_t local_count = 0;
      T unused;
      masked_mse_partial(y.local(r), target.local(r), params, frame, unused, local_count);
      divisor = T(local_count) * T(ranks);
    }
    masked_mse_backward(y.local(r), target.local(r), params, frame, divisor, dy.local(r));
  });
  return dy;
}

}  // namespace shardsim
