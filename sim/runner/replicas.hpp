// Private to the runner: the replica check's reference (every copy of a tensor on its Replicate
// dims must equal the copy at coordinate 0 of those dims bitwise).
#pragma once

#include "core/dist_tensor.hpp"

namespace shardsim {

inline bool has_replicate_dim(const Layout& layout) {
  for (const Placement& p : layout.dims) {
    if (p.is_replicate()) return true;
  }
  return false;
}

// Whether `rank` holds the first copy of its piece of `x`: coordinate 0 on every Replicate dim.
template <typename T>
bool is_first_replica(const DistTensor<T>& x, int rank) {
  for (int d = 0; d < x.layout.ndim(); ++d) {
    if (x.layout.on(d).is_replicate() && x.mesh->coord(rank, d) != 0) return false;
  }
  return true;
}

// The global tensor as the ranks at coordinate 0 of every Replicate dim hold it: the reference
// every replica must equal bitwise.
template <typename T>
Tensor<T> first_replicas(const DistTensor<T>& x) {
  Tensor<T> global(x.global);
  std::vector<Slice> whole;
  for (const Axis& axis : x.global.axes()) whole.push_back({0, axis.extent, axis.extent});
  for (int r = 0; r < x.ranks(); ++r) {
    if (is_first_replica(x, r)) copy_overlap(x.local(r), local_box(x, r), global, whole);
  }
  return global;
}

}  // namespace shardsim
