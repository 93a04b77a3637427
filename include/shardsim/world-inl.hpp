// Template bodies of world.hpp. Included by world.cpp (float, double) and world_mp.cpp (Mp).
#pragma once

#include <algorithm>
#include <sstream>

#include "shardsim/scalar.hpp"
#include "shardsim/world.hpp"

namespace shardsim {

template <typename T>
World<T>::World(int ranks, ReduceOrder order, Schedule schedule)
    : ranks_(ranks), order_(order), visit_order_(schedule_order(schedule, ranks)) {
  SHARDSIM_ASSERT(ranks >= 1, "a world needs at least one rank");
}

template <typename T>
void World<T>::for_each_rank(const std::function<void(int rank)>& body) const {
  for (int rank : visit_order_) body(rank);
}

template <typename T>
void World<T>::report(BoundaryLabel label, std::string_view default_op, const DistTensor<T>& in,
                      const DistTensor<T>& out) const {
  if (label.op.empty()) label.op = std::string(default_op);
  if (label.tensor.empty()) label.tensor = out.name;
  if (label.inputs.empty()) label.inputs = {in.name};
  if (label.kind == BoundaryKind::op) label.kind = BoundaryKind::collective;
  if (hook_) hook_(label, out);
}

template <typename T>
bool World<T>::compare_boundary(const BoundaryLabel& label, const DistTensor<T>& tensor) const {
  return hook_ ? hook_(label, tensor) : false;
}

template <typename T>
std::vector<CallDesc> World<T>::describe_calls(std::string_view collective,
                                               const DistTensor<T>& in,
                                               const Placement& to) const {
  std::vector<CallDesc> calls;
  for (int r = 0; r < ranks_; ++r) {
    calls.push_back({r, std::string(collective), ScalarTraits<T>::name, in.global, in.placement, to,
                     in.local(r).shape()});
  }
  return calls;
}

template <typename T>
void World<T>::rendezvous(const std::vector<CallDesc>& calls) const {
  // Every rank must arrive exactly once: a duplicate would hide a missing rank.
  std::vector<int> arrivals(static_cast<std::size_t>(ranks_), 0);
  std::string strangers;
  for (const CallDesc& call : calls) {
    if (call.rank >= 0 && call.rank < ranks_) {
      ++arrivals[static_cast<std::size_t>(call.rank)];
    } else {
      strangers += " " + std::to_string(call.rank);
    }
  }
  std::string missing;
  std::string repeated;
  for (int r = 0; r < ranks_; ++r) {
    if (arrivals[static_cast<std::size_t>(r)] == 0) missing += " " + std::to_string(r);
    if (arrivals[static_cast<std::size_t>(r)] > 1) repeated += " " + std::to_string(r);
  }
  if (static_cast<int>(calls.size()) != ranks_ || !missing.empty() || !repeated.empty() ||
      !strangers.empty()) {
    std::ostringstream msg;
    msg << "rendezvous: " << calls.size() << " calls for " << ranks_ << " ranks;";
    if (!missing.empty()) msg << " missing ranks:" << missing << ";";
    if (!repeated.empty()) msg << " ranks arriving more than once:" << repeated << ";";
    if (!strangers.empty()) msg << " ranks outside the group:" << strangers << ";";
    std::string text = msg.str();
    text.pop_back();
    throw RendezvousError(text);
  }
  auto describe = [](const CallDesc& c) {
    return c.collective + "<" + c.dtype + "> " + c.global.str() + " " + c.from.str() + " -> " +
           c.to.str();
  };
  auto same_call = [](const CallDesc& a, const CallDesc& b) {
    return a.collective == b.collective && a.dtype == b.dtype && a.global == b.global &&
           a.from == b.from && a.to == b.to;
  };
  // The reference is the call most ranks made (the lowest rank's on a tie), so the message
  // blames the minority even when rank 0 is the odd one out.
  std::size_t reference = 0;
  std::size_t best_votes = 0;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    const auto votes = static_cast<std::size_t>(std::count_if(
        calls.begin(), calls.end(), [&](const CallDesc& c) { return same_call(c, calls[i]); }));
    if (votes > best_votes) {
      best_votes = votes;
      reference = i;
    }
  }
  const CallDesc& first = calls[reference];
  std::vector<int> agree;
  std::vector<int> differ;
  for (const CallDesc& call : calls) (same_call(call, first) ? agree : differ).push_back(call.rank);
  auto list = [](const std::vector<int>& ranks) {
    std::string out;
    for (int r : ranks) out += (out.empty() ? "" : ",") + std::to_string(r);
    return out;
  };
  if (!differ.empty()) {
    const CallDesc& odd = calls[static_cast<std::size_t>(
        std::find_if(calls.begin(), calls.end(),
                     [&](const CallDesc& c) { return c.rank == differ.front(); }) -
        calls.begin())];
    throw RendezvousError("rendezvous mismatch: ranks " + list(agree) + " called " +
                          describe(first) + " but ranks " + list(differ) + " called " +
                          describe(odd));
  }
  for (const CallDesc& call : calls) {
    const Shape expected = local_shape(call.global, call.from, ranks_, call.rank);
    if (!(call.local == expected)) {
      throw RendezvousError("rendezvous mismatch in " + describe(call) + ": rank " +
                            std::to_string(call.rank) + " contributes local " + call.local.str() +
                            " but its placement gives " + expected.str());
    }
  }
}

template <typename T>
std::vector<T> World<T>::reduce_sum(const std::vector<const T*>& addends, std::int64_t n) const {
  const int k = static_cast<int>(addends.size());
  SHARDSIM_ASSERT(k == ranks_, "reduce_sum needs one addend per rank");
  std::vector<T> out(static_cast<std::size_t>(n), T(0));
  switch (order_) {
    case ReduceOrder::rank:
      for (std::int64_t e = 0; e < n; ++e) {
        T sum = addends[0][e];
        for (int r = 1; r < k; ++r) sum += addends[static_cast<std::size_t>(r)][e];
        out[static_cast<std::size_t>(e)] = sum;
      }
      break;
    case ReduceOrder::ring: {
      const std::int64_t chunk = (n + k - 1) / k;
      for (std::int64_t e = 0; e < n; ++e) {
        const int j = static_cast<int>(e / chunk);
        int r = (j + 1) % k;
        T sum = addends[static_cast<std::size_t>(r)][e];
        for (int hop = 1; hop < k; ++hop) {
          r = (r + 1) % k;
          sum += addends[static_cast<std::size_t>(r)][e];
        }
        out[static_cast<std::size_t>(e)] = sum;
      }
      break;
    }
    case ReduceOrder::tree: {
      std::function<T(int, int, std::int64_t)> tree_sum = [&](int lo, int hi, std::int64_t e) {
        if (hi - lo == 1) return T(addends[static_cast<std::size_t>(lo)][e]);
        const int mid = lo + (hi - lo + 1) / 2;
        return T(tree_sum(lo, mid, e) + tree_sum(mid, hi, e));
      };
      for (std::int64_t e = 0; e < n; ++e) out[static_cast<std::size_t>(e)] = tree_sum(0, k, e);
      break;
    }
  }
  return out;
}

template <typename T>
DistTensor<T> World<T>::all_gather(const DistTensor<T>& in, const BoundaryLabel& label) const {
  SHARDSIM_ASSERT(in.placement.is_shard(), "all_gather needs a Shard input");
  rendezvous(describe_calls("all_gather", in, Placement::replicate()));
  Tensor<T> gathered(in.global);
  const std::vector<Slice> slices = in.slices();
  for (int r = 0; r < ranks_; ++r) {
    copy_along(in.local(r), in.placement.axis, 0, gathered, slices[r].begin, slices[r].valid());
  }
  DistTensor<T> out = make_dist<T>(in.name, in.global, Placement::replicate(), 0);
  out.locals.assign(static_cast<std::size_t>(ranks_), gathered);
  report(label, "all_gather", in, out);
  return out;
}

template <typename T>
DistTensor<T> World<T>::all_reduce(const DistTensor<T>& in, const BoundaryLabel& label) const {
  SHARDSIM_ASSERT(in.placement.is_partial(), "all_reduce needs a Partial input");
  rendezvous(describe_calls("all_reduce", in, Placement::replicate()));
  std::vector<const T*> addends;
  for (int r = 0; r < ranks_; ++r) addends.push_back(in.local(r).data());
  Tensor<T> reduced(in.global, reduce_sum(addends, in.global.numel()));
  DistTensor<T> out = make_dist<T>(in.name, in.global, Placement::replicate(), 0);
  out.locals.assign(static_cast<std::size_t>(ranks_), reduced);
  report(label, "all_reduce", in, out);
  return out;
}

template <typename T>
DistTensor<T> World<T>::reduce_scatter(const DistTensor<T>& in, const Placement& target,
                                       const BoundaryLabel& label) const {
  SHARDSIM_ASSERT(in.placement.is_partial() && target.is_shard(),
                  "reduce_scatter goes Partial -> Shard");
  rendezvous(describe_calls("reduce_scatter", in, target));
  std::vector<const T*> addends;
  for (int r = 0; r < ranks_; ++r) addends.push_back(in.local(r).data());
  const Tensor<T> reduced(in.global, reduce_sum(addends, in.global.numel()));
  DistTensor<T> out = make_dist<T>(in.name, in.global, target, ranks_);
  const std::vector<Slice> slices = out.slices();
  for (int r = 0; r < ranks_; ++r) {
    copy_along(reduced, target.axis, slices[r].begin, out.local(r), 0, slices[r].valid());
  }
  report(label, "reduce_scatter", in, out);
  return out;
}

template <typename T>
DistTensor<T> World<T>::all_to_all(const DistTensor<T>& in, const Placement& target,
                                   const BoundaryLabel& label) const {
  SHARDSIM_ASSERT(in.placement.is_shard() && target.is_shard() &&
                      in.placement.axis != target.axis,
                  "all_to_all goes Shard(a) -> Shard(b), a != b");
  rendezvous(describe_calls("all_to_all", in, target));
  const std::string& from_axis = in.placement.axis;
  const std::string& to_axis = target.axis;
  const std::vector<Slice> from = in.slices();
  DistTensor<T> out = make_dist<T>(in.name, in.global, target, ranks_);
  const std::vector<Slice> to = out.slices();
  // Rank q receives from each rank r the block (from_axis: r's slice, to_axis: q's slice).
  for (int q = 0; q < ranks_; ++q) {
    for (int r = 0; r < ranks_; ++r) {
      const Tensor<T>& src = in.local(r);
      Tensor<T> block(src.shape().with_extent(to_axis, to[q].local_extent));
      copy_along(src, to_axis, to[q].begin, block, 0, to[q].valid());
      Tensor<T>& dst = out.local(q);
      copy_along(block, from_axis, 0, dst, from[r].begin, from[r].valid());
    }
  }
  report(label, "all_to_all", in, out);
  return out;
}

template <typename T>
DistTensor<T> World<T>::broadcast(const DistTensor<T>& in, int root,
                                  const BoundaryLabel& label) const {
  SHARDSIM_ASSERT(in.placement.is_replicate() && root >= 0 && root < ranks_,
                  "broadcast needs a Replicate input and a valid root");
  rendezvous(describe_calls("broadcast", in, Placement::replicate()));
  DistTensor<T> out = make_dist<T>(in.name, in.global, Placement::replicate(), 0);
  out.locals.assign(static_cast<std::size_t>(ranks_), in.local(root));
  report(label, "broadcast", in, out);
  return out;
}

template <typename T>
std::vector<Tensor<T>> World<T>::ring_send_recv(const std::vector<Tensor<T>>& blocks) const {
  if (static_cast<int>(blocks.size()) != ranks_) {
    throw RendezvousError("ring_send_recv: " + std::to_string(blocks.size()) + " blocks for " +
                          std::to_string(ranks_) + " ranks");
  }
  std::string differ;
  for (int r = 1; r < ranks_; ++r) {
    const Shape& mine = blocks[static_cast<std::size_t>(r)].shape();
    const Shape& first = blocks.front().shape();
    bool same = mine.rank() == first.rank();
    for (std::size_t a = 0; same && a < mine.rank(); ++a) same = mine[a].name == first[a].name;
    if (!same) differ += (differ.empty() ? "" : ",") + std::to_string(r);
  }
  if (!differ.empty()) {
    throw RendezvousError("rendezvous mismatch in ring_send_recv<" +
                          std::string(ScalarTraits<T>::name) + ">: rank 0 sends " +
                          blocks.front().shape().str() + " but ranks " + differ +
                          " send blocks with other axes");
  }
  std::vector<Tensor<T>> received(static_cast<std::size_t>(ranks_));
  for (int r = 0; r < ranks_; ++r) {
    received[static_cast<std::size_t>((r + 1) % ranks_)] = blocks[static_cast<std::size_t>(r)];
  }
  return received;
}

template <typename T>
DistTensor<T> World<T>::redistribute(const DistTensor<T>& in, const Placement& target,
                                     const BoundaryLabel& label) const {
  const Placement& from = in.placement;
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
    // Gather, then rank 0 keeps the value as its addend (Replicate -> Partial below).
    return redistribute(all_gather(in, label), target, label);
  }
  DistTensor<T> out = make_dist<T>(in.name, in.global, target, ranks_);
  if (from.is_replicate() && target.is_shard()) {
    // Local slice: every rank already holds the whole tensor.
    for_each_rank([&](int r) {
      const Slice slice = rank_slice(in.global, target, ranks_, r);
      copy_along(in.local(r), target.axis, slice.begin, out.local(r), 0, slice.valid());
    });
  } else {
    SHARDSIM_ASSERT(from.is_replicate() && target.is_partial(), "unhandled redistribute");
    // Replicate -> Partial: rank 0 keeps the value, the others hold zero addends.
    out.local(0) = in.local(0);
  }
  report(label, "redistribute", in, out);
  return out;
}

template <typename T>
void zero_padding(DistTensor<T>& tensor) {
  if (!tensor.placement.is_shard() || tensor.placement.split != SplitPolicy::padded) return;
  const std::vector<Slice> slices = tensor.slices();
  for (int r = 0; r < tensor.ranks(); ++r) {
    Tensor<T>& local = tensor.local(r);
    const AxisView view = AxisView::of(local.shape(), tensor.placement.axis);
    for (std::int64_t o = 0; o < view.outer; ++o) {
      for (std::int64_t i = slices[r].valid(); i < view.extent; ++i) {
        for (std::int64_t j = 0; j < view.inner; ++j) local[view.flat(o, i, j)] = T(0);
      }
    }
  }
}

}  // namespace shardsim
