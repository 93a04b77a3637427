// DistTensor: a global tensor as the ranks hold it. A name, a global shape, a placement on the
// 1-D mesh, and one local Tensor per rank.
//
// Invariants:
//   locals.size() == ranks;
//   locals[r].shape() == local_shape(global, placement, ranks, r);
//   padded positions (Shard with the padded split) hold T(0).
#pragma once

#include <string>
#include <vector>

#include "shardsim/placement.hpp"
#include "shardsim/tensor.hpp"

namespace shardsim {

template <typename T>
struct DistTensor {
  std::string name;
  Shape global;
  Placement placement;
  std::vector<Tensor<T>> locals;

  int ranks() const { return static_cast<int>(locals.size()); }
  Tensor<T>& local(int rank) { return locals[static_cast<std::size_t>(rank)]; }
  const Tensor<T>& local(int rank) const { return locals[static_cast<std::size_t>(rank)]; }
  // One Slice per rank along the sharded axis. REQUIRES: placement.is_shard().
  std::vector<Slice> slices() const {
    return shard_slices(global.extent(placement.axis), ranks(), placement.split);
  }
};

// An empty DistTensor with correctly shaped zero locals.
template <typename T>
DistTensor<T> make_dist(std::string name, const Shape& global, const Placement& placement,
                        int ranks) {
  DistTensor<T> out{std::move(name), global, placement, {}};
  out.locals.reserve(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) out.locals.emplace_back(local_shape(global, placement, ranks, r));
  return out;
}

// Lays a global tensor out over the ranks: data loading, before any rank program runs.
// Partial puts the whole value on rank 0 and zeros elsewhere (their sum is the value).
template <typename T>
DistTensor<T> distribute(std::string name, const Tensor<T>& global, const Placement& placement,
                         int ranks) {
  DistTensor<T> out = make_dist<T>(std::move(name), global.shape(), placement, ranks);
  for (int r = 0; r < ranks; ++r) {
    if (placement.is_replicate() || (placement.is_partial() && r == 0)) {
      out.local(r) = global;
    } else if (placement.is_shard()) {
      const Slice slice = rank_slice(global.shape(), placement, ranks, r);
      copy_along(global, placement.axis, slice.begin, out.local(r), 0, slice.valid());
    }
  }
  return out;
}

}  // namespace shardsim
