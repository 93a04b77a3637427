// The emulated world: N ranks in one process, a scheduler, and the collectives.
//
// A sharded plan alternates between two things:
//   - local phases, run by for_each_rank(): the body gets one rank id and must touch only that
//     rank's local tensors (invariant 1, README "Invariants"). The scheduler runs the ranks in rank order,
//     reverse order or a seeded shuffle; results must not depend on it.
//   - collectives, run by the world: every member's call is checked at a rendezvous (same
//     collective, dtype, global shape and placements; a local shape that matches the placement),
//     then executed, then reported to the boundary hook so that the trace records it.
// Sums follow the world's reduce order (rank, ring or tree; mesh.hpp gives each order exactly),
// computed once and copied, so every rank receives bitwise the same result.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "shardsim/dist_tensor.hpp"
#include "shardsim/mesh.hpp"
#include "shardsim/trace.hpp"

namespace shardsim {

// What one rank says it is calling.
struct CallDesc {
  int rank = 0;
  std::string collective;
  std::string dtype;
  Shape global;
  Placement from;
  Placement to;
  Shape local;  // the shape of the buffer this rank contributes
};

template <typename T>
class World {
 public:
  // Called for every boundary (compare_boundary and every collective); records it and returns
  // whether it matched the oracle bitwise.
  using Hook = std::function<bool(const BoundaryLabel&, const DistTensor<T>&)>;

  // REQUIRES: ranks >= 1.
  World(int ranks, ReduceOrder order, Schedule schedule);

  int size() const { return ranks_; }
  ReduceOrder reduce_order() const { return order_; }
  const std::vector<int>& order() const { return visit_order_; }
  void set_hook(Hook hook) { hook_ = std::move(hook); }

  // Runs body(rank) for every rank in schedule order.
  void for_each_rank(const std::function<void(int rank)>& body) const;
  // The comparison call: hands an op's boundary to the hook, which records it in the trace and
  // compares it with the oracle tensor the label names (trace.hpp, the boundary contract).
  // Returns whether every element matched the oracle bitwise. Collectives call it themselves.
  bool compare_boundary(const BoundaryLabel& label, const DistTensor<T>& tensor) const;

  // Shard(a) -> Replicate.
  DistTensor<T> all_gather(const DistTensor<T>& in, const BoundaryLabel& label) const;
  // Partial -> Replicate.
  DistTensor<T> all_reduce(const DistTensor<T>& in, const BoundaryLabel& label) const;
  // Partial -> Shard(a).
  DistTensor<T> reduce_scatter(const DistTensor<T>& in, const Placement& target,
                               const BoundaryLabel& label) const;
  // Shard(a) -> Shard(b), a != b.
  DistTensor<T> all_to_all(const DistTensor<T>& in, const Placement& target,
                           const BoundaryLabel& label) const;
  // Replicate (as held by `root`) -> Replicate on every rank.
  DistTensor<T> broadcast(const DistTensor<T>& in, int root, const BoundaryLabel& label) const;
  // Ring send/recv, one hop: rank r sends blocks[r] to rank (r + 1) mod k and receives rank
  // (r - 1) mod k's block, as NCCL send/recv pairs around the ring (ring attention). Blocks travel
  // unchanged and may differ in shape (uneven shards); every rank must send a block with rank 0's
  // axis names, or a RendezvousError names the ranks that differ. A hop computes nothing, so it
  // is not a boundary: the plan records the blocks at their owners and what it computes.
  std::vector<Tensor<T>> ring_send_recv(const std::vector<Tensor<T>>& blocks) const;
  // Composes the collectives as DTensor does: S->R all-gather, P->R all-reduce,
  // P->S reduce-scatter, R->S local slice, S(i)->S(j) all-to-all, R->P keep rank 0's copy,
  // S->P all-gather then keep rank 0's copy.
  DistTensor<T> redistribute(const DistTensor<T>& in, const Placement& target,
                             const BoundaryLabel& label) const;

  // Checks that all members made the same call; throws RendezvousError naming the ranks.
  void rendezvous(const std::vector<CallDesc>& calls) const;

  // Elementwise sum of `addends` (one buffer of n elements per rank, in rank order) in this
  // world's reduce order.
  std::vector<T> reduce_sum(const std::vector<const T*>& addends, std::int64_t n) const;

 private:
  std::vector<CallDesc> describe_calls(std::string_view collective, const DistTensor<T>& in,
                                       const Placement& to) const;
  void report(BoundaryLabel label, std::string_view default_op, const DistTensor<T>& in,
              const DistTensor<T>& out) const;

  int ranks_;
  ReduceOrder order_;
  std::vector<int> visit_order_;
  Hook hook_;
};

extern template class World<float>;
extern template class World<double>;

// Padding positions (Shard with the padded split) are reset to zero after each local phase so
// that a kernel's value on a pad row never flows into a collective.
template <typename T>
void zero_padding(DistTensor<T>& tensor);

}  // namespace shardsim
