// Template bodies of the collectives (world.hpp): each runs in every group of the world's dim,
// moving data by global position (copy_overlap), so nested shards and uneven or empty pieces
// need no special case. Included by world-inl.hpp.
#pragma once

#include "core/world.hpp"

namespace shardsim {

template <typename T>
DistTensor<T> World<T>::all_gather(const DistTensor<T>& in, const BoundaryLabel& label) const {
  const Placement& from = placement(in);
  SHARDSIM_ASSERT(from.is_shard(), "all_gather needs a Shard input");
  for (int d = dim_ + 1; d < mesh().ndim(); ++d) {
    SHARDSIM_ASSERT(!(in.layout.on(d).is_shard() && in.layout.on(d).axis == from.axis),
                    "all_gather: a later dim shards the same axis");
  }
  DistTensor<T> out = make(in.name, in.global, in.layout.with(dim_, Placement::replicate()));
  const std::vector<Tensor<T>> remote = fetch(in, "all_gather", out.layout);
  for (const std::vector<int>& group : mesh().groups(dim_)) {
    for (int q : group) {
      if (!holds(q)) continue;
      const std::vector<Slice> to = local_box(out, q);
      for (int r : group) copy_overlap(input(in, remote, r), local_box(in, r), out.local(q), to);
    }
  }
  report(label, "all_gather", in, out);
  return out;
}

template <typename T>
DistTensor<T> World<T>::all_reduce(const DistTensor<T>& in, const BoundaryLabel& label) const {
  SHARDSIM_ASSERT(placement(in).is_partial(), "all_reduce needs a Partial input");
  DistTensor<T> out = make(in.name, in.global, in.layout.with(dim_, Placement::replicate()));
  const std::vector<Tensor<T>> remote = fetch(in, "all_reduce", out.layout);
  for (const std::vector<int>& group : mesh().groups(dim_)) {
    if (!serves(group)) continue;
    std::vector<const T*> addends;
    for (int r : group) addends.push_back(input(in, remote, r).data());
    const std::int64_t n = input(in, remote, group.front()).numel();
    std::vector<T> sum = reduce_sum(addends, n);
    for (int r : group) {
      if (holds(r)) out.local(r).values() = sum;
    }
  }
  report(label, "all_reduce", in, out);
  return out;
}

template <typename T>
DistTensor<T> World<T>::reduce_scatter(const DistTensor<T>& in, const Placement& target,
                                       const BoundaryLabel& label) const {
  SHARDSIM_ASSERT(placement(in).is_partial() && target.is_shard(),
                  "reduce_scatter goes Partial -> Shard");
  DistTensor<T> out = make(in.name, in.global, in.layout.with(dim_, target));
  const std::vector<Tensor<T>> remote = fetch(in, "reduce_scatter", out.layout);
  for (const std::vector<int>& group : mesh().groups(dim_)) {
    if (!serves(group)) continue;
    std::vector<const T*> addends;
    for (int r : group) addends.push_back(input(in, remote, r).data());
    const Tensor<T>& first = input(in, remote, group.front());
    const Tensor<T> reduced(first.shape(), reduce_sum(addends, first.numel()));
    const std::vector<Slice> from = local_box(in, group.front());
    for (int q : group) {
      if (holds(q)) copy_overlap(reduced, from, out.local(q), local_box(out, q));
    }
  }
  report(label, "reduce_scatter", in, out);
  return out;
}

template <typename T>
DistTensor<T> World<T>::all_to_all(const DistTensor<T>& in, const Placement& target,
                                   const BoundaryLabel& label) const {
  const Placement& from = placement(in);
  SHARDSIM_ASSERT(from.is_shard() && target.is_shard() && from.axis != target.axis,
                  "all_to_all goes Shard(a) -> Shard(b), a != b");
  DistTensor<T> out = make(in.name, in.global, in.layout.with(dim_, target));
  const std::vector<Tensor<T>> remote = fetch(in, "all_to_all", out.layout);
  for (const std::vector<int>& group : mesh().groups(dim_)) {
    // Member q receives from each member r the block (from axis: r's piece, to axis: q's).
    for (int q : group) {
      if (!holds(q)) continue;
      const std::vector<Slice> to = local_box(out, q);
      for (int r : group) copy_overlap(input(in, remote, r), local_box(in, r), out.local(q), to);
    }
  }
  report(label, "all_to_all", in, out);
  return out;
}

template <typename T>
DistTensor<T> World<T>::broadcast(const DistTensor<T>& in, int root,
                                  const BoundaryLabel& label) const {
  SHARDSIM_ASSERT(placement(in).is_replicate() && root >= 0 && root < group_size(),
                  "broadcast needs a Replicate input and a coordinate of the group");
  DistTensor<T> out = make(in.name, in.global, in.layout);
  const std::vector<Tensor<T>> remote = fetch(in, "broadcast", out.layout);
  for (const std::vector<int>& group : mesh().groups(dim_)) {
    for (int r : group) {
      if (holds(r)) out.local(r) = input(in, remote, group[static_cast<std::size_t>(root)]);
    }
  }
  report(label, "broadcast", in, out);
  return out;
}

template <typename T>
std::vector<Tensor<T>> World<T>::ring_send_recv(const std::vector<Tensor<T>>& blocks) const {
  if (static_cast<int>(blocks.size()) != size()) {
    throw RendezvousError("ring_send_recv: " + std::to_string(blocks.size()) + " blocks for " +
                          std::to_string(size()) + " ranks");
  }
  // The member of rank r's group at the next coordinate: r's block goes to it.
  auto next = [&](int r) { return peer(r, (coord(r) + 1) % group_size()); };
  std::vector<Tensor<T>> remote;
  std::vector<Shape> shapes;
  if (transport()) {
    std::vector<CallDesc> mine;
    for (int r = mesh().held_begin(); r < mesh().held_end(); ++r) {
      mine.push_back({r, "ring_send_recv", ScalarTraits<T>::name, Shape(), Layout(), Layout(),
                      blocks[static_cast<std::size_t>(r)].shape()});
    }
    const int processes = transport()->processes();
    std::vector<CallDesc> calls;
    remote = deliver(
        mine, [&](int r) -> const Tensor<T>& { return blocks[static_cast<std::size_t>(r)]; },
        [&](int r, int p) { return rank_owner(next(r), processes, size()) == p; }, calls);
    for (const std::vector<int>& group : mesh().groups(dim_)) {
      std::vector<CallDesc> of_group;
      for (int r : group) {
        if (calls[static_cast<std::size_t>(r)].rank >= 0) of_group.push_back(calls[static_cast<std::size_t>(r)]);
      }
      rendezvous(group, of_group);
    }
    for (const CallDesc& c : calls) shapes.push_back(c.local);
  } else {
    for (const Tensor<T>& b : blocks) shapes.push_back(b.shape());
  }
  check_ring(shapes);
  std::vector<Tensor<T>> received(blocks.size());
  for (int r = 0; r < size(); ++r) {
    const int to = next(r);
    if (!holds(to)) continue;
    received[static_cast<std::size_t>(to)] =
        holds(r) ? blocks[static_cast<std::size_t>(r)] : std::move(remote[static_cast<std::size_t>(r)]);
  }
  return received;
}

template <typename T>
DistTensor<T> World<T>::redistribute(const DistTensor<T>& in, const Placement& target,
                                     const BoundaryLabel& label) const {
  const Placement& from = placement(in);
  if (from == target) return in;
  if (from.is_shard() && target.is_replicate()) return all_gather(in, label);
  if (from.is_partial() && target.is_replicate()) return all_reduce(in, label);
  if (from.is_partial() && target.is_shard()) return reduce_scatter(in, target, label);
  if (from.is_shard() && target.is_shard()) {
    if (from.axis != target.axis) return all_to_all(in, target, label);
    // Same axis, different split: gather then slice locally.
    return redistribute(all_gather(in, label), target, label);
  }
  if (from.is_shard() && target.is_partial()) {
    // Gather, then coordinate 0 keeps the value as its addend (Replicate -> Partial below).
    return redistribute(all_gather(in, label), target, label);
  }
  DistTensor<T> out = make(in.name, in.global, in.layout.with(dim_, target));
  if (from.is_replicate() && target.is_shard()) {
    // Local slice: every member already holds its whole piece.
    for_each_rank([&](int r) {
      copy_overlap(in.local(r), local_box(in, r), out.local(r), local_box(out, r));
    });
  } else {
    SHARDSIM_ASSERT(from.is_replicate() && target.is_partial(), "unhandled redistribute");
    // Replicate -> Partial: coordinate 0 keeps the value, the others hold zero addends.
    for_each_rank([&](int r) {
      if (coord(r) == 0) out.local(r) = in.local(r);
    });
  }
  report(label, "redistribute", in, out);
  return out;
}

template <typename T>
DistTensor<T> World<T>::redistribute(const DistTensor<T>& in, const Layout& target,
                                     const BoundaryLabel& label) const {
  DistTensor<T> moved = in;
  for (int d = 0; d < mesh().ndim(); ++d) {
    if (moved.layout.on(d) == target.on(d)) continue;
    moved = on(d).redistribute(moved, target.on(d), label);
  }
  return moved;
}

template <typename T>
void zero_padding(DistTensor<T>& tensor) {
  if (!tensor.layout.has_padding()) return;
  for (int r = 0; r < tensor.ranks(); ++r) {
    if (!tensor.held(r)) continue;
    Tensor<T>& local = tensor.local(r);
    for (const Axis& axis : tensor.global.axes()) {
      const Slice slice = tensor.slice(r, axis.name);
      if (slice.pad() == 0) continue;
      const AxisView view = AxisView::of(local.shape(), axis.name);
      for (std::int64_t o = 0; o < view.outer; ++o) {
        for (std::int64_t i = slice.valid(); i < view.extent; ++i) {
          for (std::int64_t j = 0; j < view.inner; ++j) local[view.flat(o, i, j)] = T(0);
        }
      }
    }
  }
}

}  // namespace shardsim
