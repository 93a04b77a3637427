// The emulated world: the ranks of a device mesh in one process, a scheduler, and the collectives.
//
// A sharded plan alternates between two things:
//   - local phases, run by for_each_rank(): the body gets one global rank and must touch only
//     that rank's local tensors (invariant 1 in docs/architecture.md). The scheduler visits every
//     rank of the mesh in rank order, reverse order or a seeded shuffle; results must not depend
//     on it. With --threads N > 1 the ranks of one phase also run concurrently (parallel.hpp),
//     so a body must not write anything shared: no trace, no hook, no collective inside it.
//   - collectives, run by the world on one mesh dim, the world's `dim()`: each runs in every
//     group of that dim (the ranks that share all other coordinates, mesh.hpp), with its own
//     rendezvous check (same collective, dtype, global shape and layouts; local shapes that match
//     the layout), then reports its result to the boundary hook so that the trace records it.
// A plan sees the world bound to its step's mesh dim (World::on); on a 1-D mesh that is the only
// dim. Sums follow the world's reduce order (rank, ring or tree; mesh.hpp gives each exactly)
// over a group's members in coordinate order, computed once per group and copied, so every
// member receives bitwise the same result.
//
// Over a transport (transport.hpp) of P processes every process runs the same control flow and
// holds a contiguous block of the ranks (rank_block): for_each_rank visits only its own ranks, a
// DistTensor allocates only their locals (the others stay empty), and each collective first
// delivers, from the processes that hold them, exactly the members' buffers of the groups this
// process has a member in (all_reduce, reduce_scatter, all_gather, all_to_all: the whole group;
// broadcast: the root's; a ring hop: the previous member's), then computes as in one process with
// the same reduce order, for its own members only. So results are bitwise those of one process.
// Every process sends every process the calls of its ranks, so each runs the rendezvous check of
// every group and a mismatch throws the same RendezvousError on all of them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/dist_tensor.hpp"
#include "core/mesh.hpp"
#include "core/trace.hpp"
#include "core/transport.hpp"

namespace shardsim {

// What one rank says it is calling.
struct CallDesc {
  int rank = 0;
  std::string collective;
  std::string dtype;
  Shape global;
  Layout from;
  Layout to;
  Shape local;  // the shape of the buffer this rank contributes
};

template <typename T>
class World {
 public:
  // Called for every boundary (compare_boundary and every collective); records it and returns
  // whether it matched the oracle bitwise. In a narrow run it first rounds the tensor in place
  // to the storage format when the boundary holds a stored value (storage.hpp), so the caller
  // goes on with the rounded values.
  using Hook = std::function<bool(const BoundaryLabel&, DistTensor<T>&)>;

  // Collectives run on dim 0 until on() picks another. With a transport this process holds the
  // ranks of its rank_block; throws InputError when there are more processes than ranks.
  World(Mesh mesh, ReduceOrder order, Schedule schedule,
        std::shared_ptr<const Transport> transport = nullptr);
  // The 1-D mesh of `ranks` ranks. REQUIRES: ranks >= 1.
  World(int ranks, ReduceOrder order, Schedule schedule);

  const Mesh& mesh() const { return *shared_->mesh; }
  const std::shared_ptr<const Mesh>& mesh_ptr() const { return shared_->mesh; }
  int size() const { return mesh().size(); }  // every rank of the mesh: one local each
  ReduceOrder reduce_order() const { return shared_->order; }
  const std::vector<int>& order() const { return shared_->visit_order; }
  void set_hook(Hook hook) { shared_->hook = std::move(hook); }
  // Null for the local transport (one process holds every rank).
  const Transport* transport() const { return shared_->transport.get(); }
  bool holds(int rank) const { return mesh().holds(rank); }

  // This world bound to mesh dim `dim`: the same ranks, hook and orders; its collectives run in
  // the groups of `dim`. REQUIRES: 0 <= dim < mesh().ndim().
  World on(int dim) const;
  int dim() const { return dim_; }
  int group_size() const { return mesh().dim(dim_).size; }
  // `rank`'s coordinate on dim(), and the member of its group at coordinate `coord`.
  int coord(int rank) const { return mesh().coord(rank, dim_); }
  int peer(int rank, int coord) const { return mesh().with_coord(rank, dim_, coord); }

  // This world with every sum of its collectives rounded in place by `round` after each addition
  // (each hop of the reduce order), as a collective that adds in a narrower dtype does (FSDP's
  // reduce_dtype, sim/runner/fsdp_mixed.hpp); an empty function: none. The addends are the
  // caller's to round.
  World rounding_sums(std::function<void(T&)> round) const {
    World out = *this;
    out.round_ = std::move(round);
    return out;
  }

  // The tensor's placement on dim().
  const Placement& placement(const DistTensor<T>& x) const { return x.layout.on(dim_); }
  // A zero tensor laid out as `layout` on this world's mesh.
  DistTensor<T> make(std::string name, const Shape& global, const Layout& layout) const {
    return make_dist<T>(std::move(name), global, layout, mesh_ptr());
  }

  // Runs body(rank) for every rank: handed out in schedule order, concurrently on up to
  // thread_count() threads. REQUIRES: body touches only rank `rank`'s data.
  void for_each_rank(const std::function<void(int rank)>& body) const;
  // The comparison call: hands an op's boundary to the hook, which records it in the trace and
  // compares it with the oracle tensor the label names (trace.hpp, the boundary contract).
  // Returns whether every element matched the oracle bitwise. Collectives call it themselves.
  // The hook may round `tensor` in place (narrow runs): pass the tensor the plan goes on with.
  bool compare_boundary(const BoundaryLabel& label, DistTensor<T>& tensor) const;

  // The collectives, on dim(); each changes only the placement on dim().
  // Shard(a) -> Replicate. REQUIRES: no later dim shards a (its pieces would not be contiguous).
  DistTensor<T> all_gather(const DistTensor<T>& in, const BoundaryLabel& label) const;
  // Partial -> Replicate.
  DistTensor<T> all_reduce(const DistTensor<T>& in, const BoundaryLabel& label) const;
  // Partial -> Shard(a).
  DistTensor<T> reduce_scatter(const DistTensor<T>& in, const Placement& target,
                               const BoundaryLabel& label) const;
  // Shard(a) -> Shard(b), a != b.
  DistTensor<T> all_to_all(const DistTensor<T>& in, const Placement& target,
                           const BoundaryLabel& label) const;
  // Replicate (as held by the group member at coordinate `root`) -> Replicate on every member.
  DistTensor<T> broadcast(const DistTensor<T>& in, int root, const BoundaryLabel& label) const;
  // Ring send/recv, one hop in every group: the member at coordinate c sends blocks[rank] to the
  // member at (c + 1) mod k and receives the block of (c - 1) mod k, as NCCL send/recv pairs
  // around the ring (ring attention). `blocks` has one entry per rank of the mesh. Blocks travel
  // unchanged and may differ in shape (uneven shards); every member must send a block with the
  // axis names of the group's first member, or a RendezvousError names the ranks that differ. A
  // hop computes nothing, so it is not a boundary: the plan records the blocks at their owners
  // and what it computes.
  std::vector<Tensor<T>> ring_send_recv(const std::vector<Tensor<T>>& blocks) const;
  // Composes the collectives on dim() as DTensor does: S->R all-gather, P->R all-reduce,
  // P->S reduce-scatter, R->S local slice, S(i)->S(j) all-to-all, R->P keep the coordinate-0
  // member's copy, S->P all-gather then keep coordinate 0's copy.
  DistTensor<T> redistribute(const DistTensor<T>& in, const Placement& target,
                             const BoundaryLabel& label) const;
  // Every dim whose placement differs from `target`'s, in mesh-dim order, through the above.
  DistTensor<T> redistribute(const DistTensor<T>& in, const Layout& target,
                             const BoundaryLabel& label) const;

  // `x` with every rank's local on every process (a copy, on a mesh that holds every rank).
  // With `to_root` only process 0 receives the others' locals (the boundary gather that hands a
  // boundary to the oracle's comparison on process 0, and the replica checks' reference); every
  // other process gets `x` back as it is. Every process must call it at the same point (the
  // rendezvous check runs on all). Moves no data with the local transport.
  DistTensor<T> share(const DistTensor<T>& x, bool to_root = false) const;
  // Process 0's `message`, on every process (each passes its own; only process 0's is read).
  // Every process must call it at the same point. The local transport returns `message`.
  std::string from_root(std::string message) const;
  // A per-rank figure (one entry per rank) with each rank's entry taken from the process that
  // holds it (the others are ignored): the activation-memory accounting. Every process must call
  // it at the same point; the local transport returns `values` unchanged.
  std::vector<std::int64_t> from_owners(std::vector<std::int64_t> values) const;

  // Checks that the members of one group (listed by coordinate) made the same call; throws
  // RendezvousError naming the ranks otherwise.
  void rendezvous(const std::vector<int>& group, const std::vector<CallDesc>& calls) const;

  // Elementwise sum of `addends` (one buffer of n elements per group member, in coordinate
  // order) in this world's reduce order.
  std::vector<T> reduce_sum(const std::vector<const T*>& addends, std::int64_t n) const;

 private:
  struct Shared {
    std::shared_ptr<const Mesh> mesh;
    ReduceOrder order;
    std::vector<int> visit_order;
    Hook hook;
    std::shared_ptr<const Transport> transport;
  };

  // Whether rank r's buffer goes to process p.
  using Wants = std::function<bool(int rank, int process)>;
  // Checks one group's calls of `collective` from `in`'s layout to `to`.
  void check_group(std::string_view collective, const std::vector<int>& group,
                   const DistTensor<T>& in, const Layout& to) const;
  // Before a collective: checks every group's calls (across processes over a transport) and
  // returns, by rank, the locals of `in` this process does not hold but its groups need (empty
  // with the local transport). input(in, remote, r) reads member r's buffer either way.
  std::vector<Tensor<T>> fetch(const DistTensor<T>& in, std::string_view collective,
                               const Layout& to) const;
  static const Tensor<T>& input(const DistTensor<T>& in, const std::vector<Tensor<T>>& remote,
                                int rank) {
    return remote.empty() || in.held(rank) ? in.local(rank)
                                           : remote[static_cast<std::size_t>(rank)];
  }
  // Whether this process holds a member of `group`.
  bool serves(const std::vector<int>& group) const;
  // One exchange over the transport: sends this process's `calls` to every process and each
  // held rank's tensor (tensor(r)) to the processes `wants` names; returns every process's calls
  // (by rank) in `all_calls` and the tensors received, by rank.
  std::vector<Tensor<T>> deliver(const std::vector<CallDesc>& calls,
                                 const std::function<const Tensor<T>&(int rank)>& tensor,
                                 const Wants& wants, std::vector<CallDesc>& all_calls) const;
  // The ring hop's check: every member sends a block with its group's first member's axes.
  void check_ring(const std::vector<Shape>& shapes) const;
  void report(BoundaryLabel label, std::string_view default_op, const DistTensor<T>& in,
              DistTensor<T>& out) const;

  std::shared_ptr<Shared> shared_;
  int dim_ = 0;
  std::function<void(T&)> round_;  // rounding_sums
};

extern template class World<float>;
extern template class World<double>;

// Padding positions (Shard with the padded split, on any dim) are reset to zero after each local
// phase so that a kernel's value on a pad position never flows into a collective.
template <typename T>
void zero_padding(DistTensor<T>& tensor);

}  // namespace shardsim
