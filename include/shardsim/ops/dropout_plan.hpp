// Sharded plan for dropout. Each rank draws its own mask from its local shape and its frame under
// the plan's policy (rng.hpp); no collective is needed. Under the global policy every rank's mask
// is the slice of the dense mask, so the mask and y match the oracle bit for bit.
//
// Boundaries, in order:
//   OUTPUT.mask@repetition  (check, Shard inputs only) the repetition detector's verdict as a
//                           [rank=k, peer=k] Replicate tensor: 1 at (a, b), a < b, when ranks a and
//                           b repeat each other's masks, else 0. The oracle's is all zeros, so a
//                           repeated pair is the first divergence and its index names the ranks;
//                           each pair's agreement is a note on the boundary.
//   OUTPUT.mask             the keep mask as values 1 / 0, exact
//   OUTPUT                  y, exact
// A Replicate input is not checked for repetition: there every rank holds the same elements and
// must draw the same mask, which the mask boundary checks on every rank.
#pragma once

#include <string>
#include <vector>

#include "shardsim/ops/dropout.hpp"
#include "shardsim/world.hpp"

namespace shardsim {

struct DropoutShardedSaved {
  std::vector<DropoutMask> masks;  // one per rank, the local mask
};

// Rank `rank`'s frame: where its local tensor of `x` sits in the global one.
inline DropoutFrame dropout_frame(const Shape& global, const Placement& placement, int ranks,
                                  int rank) {
  DropoutFrame frame;
  frame.global = global;
  frame.rank = rank;
  if (placement.is_shard()) {
    const Slice slice = rank_slice(global, placement, ranks, rank);
    frame.axis = placement.axis;
    frame.begin = slice.begin;
    frame.valid = slice.valid();
  }
  return frame;
}

// The detector's verdict tensor and notes for the ranks' masks (see the header comment).
template <typename T>
DistTensor<T> repetition_check(const std::vector<DropoutMask>& masks, std::uint32_t threshold,
                               const std::string& name, std::vector<std::string>& notes) {
  const int ranks = static_cast<int>(masks.size());
  std::vector<std::vector<std::uint8_t>> keeps, valid;
  for (const DropoutMask& mask : masks) {
    keeps.push_back(mask.keep);
    valid.push_back(mask.valid);
  }
  const Shape shape({{"rank", ranks}, {"peer", ranks}});
  Tensor<T> flags(shape);
  for (const MaskAgreement& pair : mask_agreement(keeps, valid, threshold)) {
    if (pair.repeated) flags[pair.rank_a * ranks + pair.rank_b] = T(1);
    notes.push_back(pair.str());
  }
  DistTensor<T> out = make_dist<T>(name, shape, Placement::replicate(), 0);
  out.locals.assign(static_cast<std::size_t>(ranks), flags);
  return out;
}

// REQUIRES: x is not Partial. y has x's placement.
template <typename T>
DistTensor<T> dropout_sharded(const World<T>& world, const DistTensor<T>& x,
                              const DropoutParams& params, DropoutPolicy policy,
                              const std::string& output, DropoutShardedSaved& saved) {
  SHARDSIM_ASSERT(!x.placement.is_partial(), "dropout needs a Shard or Replicate input");
  const int ranks = world.size();
  saved.masks.assign(static_cast<std::size_t>(ranks), {});
  DistTensor<T> mask = make_dist<T>(output + ".mask", x.global, x.placement, ranks);
  DistTensor<T> y = make_dist<T>(output, x.global, x.placement, ranks);
  world.for_each_rank([&](int r) {
    DropoutMask& local = saved.masks[static_cast<std::size_t>(r)];
    local = dropout_mask(x.local(r).shape(),
                         dropout_frame(x.global, x.placement, ranks, r), params, policy);
    mask.local(r) = mask_values<T>(x.local(r).shape(), local);
    dropout_forward(x.local(r), local, params.p, y.local(r));
  });
  zero_padding(mask);
  zero_padding(y);
  if (x.placement.is_shard()) {
    // The checker reads every rank's mask here; the rank programs above did not.
    std::vector<std::string> notes;
    const DistTensor<T> check = repetition_check<T>(
        saved.masks, dropout_threshold(params.p), output + ".mask@repetition", notes);
    world.compare_boundary({.op = "dropout_repetition", .tensor = check.name, .exact = true,
                  .kind = BoundaryKind::check, .notes = notes},
                 check);
  }
  world.compare_boundary({.op = "dropout", .tensor = mask.name, .exact = true}, mask);
  world.compare_boundary({.op = "dropout", .tensor = output, .exact = true, .inputs = {x.name, mask.name}},
               y);
  return y;
}

// dx = dy * scale where this rank's mask keeps, else 0. REQUIRES: dy is held at
// elementwise_grad_target(x, dy) (add_plan.hpp). dx has dy's placement; the caller records it.
template <typename T>
DistTensor<T> dropout_backward_sharded(const World<T>& world, const DistTensor<T>& dy,
                                       const DropoutShardedSaved& saved, double p,
                                       const std::string& name) {
  DistTensor<T> dx = make_dist<T>(name, dy.global, dy.placement, world.size());
  world.for_each_rank([&](int r) {
    dropout_backward(dy.local(r), saved.masks[static_cast<std::size_t>(r)], p, dx.local(r));
  });
  zero_padding(dx);
  return dx;
}

}  // namespace shardsim
