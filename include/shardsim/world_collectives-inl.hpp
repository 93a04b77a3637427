// Template bodies of the collectives (world.hpp): each runs in every group of the world's dim,
// moving data by global position (copy_overlap), so nested shards and uneven or empty pieces
// need no special case. Included by world-inl.hpp.
#pragma once

#include "shardsim/world.hpp"

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
  for (const std::vector<int>& group : mesh().groups(dim_)) {
    check_group("all_gather", group, in, out.layout);
    for (int q : group) {
      const std::vector<Slice> to = local_box(out, q);
      for (int r : group) copy_overlap(in.local(r), local_box(in, r), out.local(q), to);
    }
  }
  report(label, "all_gather", in, out);
  return out;
}

template <typename T>
DistTensor<T> World<T>::all_reduce(const DistTensor<T>& in, const BoundaryLabel& label) const {
  SHARDSIM_ASSERT(placement(in).is_partial(), "all_reduce needs a Partial input");
  DistTensor<T> out = make(in.name, in.global, in.layout.with(dim_, Placement::replicate()));
  for (const std::vector<int>& group : mesh().groups(dim_)) {
    check_group("all_reduce", group, in, out.layout);
    std::vector<const T*> addends;
    for (int r : group) addends.push_back(in.local(r).data());
    const std::int64_t n = in.local(group.front()).numel();
    std::vector<T> sum = reduce_sum(addends, n);
    for (int r : group) out.local(r).values() = sum;
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
  for (const std::vector<int>& group : mesh().groups(dim_)) {
    check_group("reduce_scatter", group, in, out.layout);
    std::vector<const T*> addends;
    for (int r : group) addends.push_back(in.local(r).data());
    const Tensor<T>& first = in.local(group.front());
    const Tensor<T> reduced(first.shape(), reduce_sum(addends, first.numel()));
    const std::vector<Slice> from = local_box(in, group.front());
    for (int q : group) copy_overlap(reduced, from, out.local(q), local_box(out, q));
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
  for (const std::vector<int>& group : mesh().groups(dim_)) {
    check_group("all_to_all", group, in, out.layout);
    // Member q receives from each member r the block (from axis: r's piece, to axis: q's).
    for (int q : group) {
      const std::vector<Slice> to = local_box(out, q);
      for (int r : group) copy_overlap(in.local(r), local_box(in, r), out.local(q), to);
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
  for (const std::vector<int>& group : mesh().groups(dim_)) {
    check_group("broadcast", group, in, out.layout);
    for (int r : group) out.local(r) = in.local(group[static_cast<std::size_t>(root)]);
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
  std::vector<Tensor<T>> received(blocks.size());
  for (const std::vector<int>& group : mesh().groups(dim_)) {
    const Shape& first = blocks[static_cast<std::size_t>(group.front())].shape();
    std::string differ;
    for (int r : group) {
      const Shape& mine = blocks[static_cast<std::size_t>(r)].shape();
      bool same = mine.rank() == first.rank();
      for (std::size_t a = 0; same && a < mine.rank(); ++a) same = mine[a].name == first[a].name;
      if (!same) differ += (differ.empty() ? "" : ",") + std::to_string(r);
    }
    if (!differ.empty()) {
      throw RendezvousError("rendezvous mismatch in ring_send_recv<" +
                            std::string(ScalarTraits<T>::name) + ">: rank " +
                            std::to_string(group.front()) + " sends " + first.str() +
                            " but ranks " + differ + " send blocks with other axes");
    }
    const int k = static_cast<int>(group.size());
    for (int c = 0; c < k; ++c) {
      received[static_cast<std::size_t>(group[static_cast<std::size_t>((c + 1) % k)])] =
          blocks[static_cast<std::size_t>(group[static_cast<std::size_t>(c)])];
    }
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
  bool padded = false;
  for (const Placement& p : tensor.layout.dims) {
    padded = padded || (p.is_shard() && p.split == SplitPolicy::padded);
  }
  if (!padded) return;
  for (int r = 0; r < tensor.ranks(); ++r) {
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
