// Test helpers that read a DistTensor back through its placement metadata only, independent
// of the production comparator: assemble() rebuilds the global tensor, for_each_valid() visits
// every compared element, bitwise_equal() compares two tensors bit for bit.
#pragma once

#include <catch2/catch.hpp>
#include <cstdint>

#include "core/dist_tensor.hpp"
#include "core/mp.hpp"
#include "core/scalar.hpp"

namespace dist_test {

using shardsim::DistTensor;
using shardsim::Placement;
using shardsim::Tensor;

// Rebuilds the global tensor from the ranks' locals using only the placement metadata: Shard
// copies each rank's valid positions to its global slice (padding must hold zero), Replicate
// takes rank 0's copy after checking every rank holds the same bits, Partial sums the addends
// in rank order.
template <typename T>
Tensor<T> assemble(const DistTensor<T>& dist) {
  const Placement& p = dist.layout.on(0);
  for (int r = 0; r < dist.ranks(); ++r) {
    REQUIRE(dist.local(r).shape() == shardsim::local_shape(dist.global, p, dist.ranks(), r));
  }
  if (p.is_replicate()) {
    for (int r = 1; r < dist.ranks(); ++r) {
      for (std::int64_t e = 0; e < dist.local(0).numel(); ++e) {
        REQUIRE(shardsim::ScalarTraits<T>::identical(dist.local(r)[e], dist.local(0)[e]));
      }
    }
    return dist.local(0);
  }
  Tensor<T> global(dist.global);
  if (p.is_partial()) {
    global = dist.local(0);
    for (int r = 1; r < dist.ranks(); ++r) {
      for (std::int64_t e = 0; e < global.numel(); ++e) global[e] += dist.local(r)[e];
    }
    return global;
  }
  const auto gv = shardsim::AxisView::of(dist.global, p.axis);
  for (int r = 0; r < dist.ranks(); ++r) {
    const shardsim::Slice slice = shardsim::rank_slice(dist.global, p, dist.ranks(), r);
    const Tensor<T>& local = dist.local(r);
    const auto lv = shardsim::AxisView::of(local.shape(), p.axis);
    for (std::int64_t o = 0; o < lv.outer; ++o) {
      for (std::int64_t i = 0; i < lv.extent; ++i) {
        for (std::int64_t j = 0; j < lv.inner; ++j) {
          const T& value = local[lv.flat(o, i, j)];
          if (shardsim::is_pad(slice, i)) {
            REQUIRE(value == T(0));
          } else {
            global[gv.flat(o, shardsim::to_global(slice, i), j)] = value;
          }
        }
      }
    }
  }
  return global;
}

template <typename T>
bool bitwise_equal(const Tensor<T>& a, const Tensor<T>& b) {
  if (!(a.shape() == b.shape())) return false;
  for (std::int64_t e = 0; e < a.numel(); ++e) {
    if (!shardsim::ScalarTraits<T>::identical(a[e], b[e])) return false;
  }
  return true;
}

// Calls visit(rank, local flat, global flat) for every compared element of a sharded tensor:
// every element of each rank for Replicate, the non-pad elements of each shard for Shard.
template <typename T, typename Visit>
void for_each_valid(const DistTensor<T>& dist, Visit visit) {
  for (int r = 0; r < dist.ranks(); ++r) {
    const Tensor<T>& local = dist.local(r);
    if (!dist.layout.on(0).is_shard()) {
      for (std::int64_t e = 0; e < local.numel(); ++e) visit(r, e, e);
      continue;
    }
    const auto slice = shardsim::rank_slice(dist.global, dist.layout.on(0), dist.ranks(), r);
    const auto lv = shardsim::AxisView::of(local.shape(), dist.layout.on(0).axis);
    const auto gv = shardsim::AxisView::of(dist.global, dist.layout.on(0).axis);
    for (std::int64_t o = 0; o < lv.outer; ++o) {
      for (std::int64_t i = 0; i < slice.valid(); ++i) {
        for (std::int64_t j = 0; j < lv.inner; ++j) {
          visit(r, lv.flat(o, i, j), gv.flat(o, shardsim::to_global(slice, i), j));
        }
      }
    }
  }
}

}  // namespace dist_test
