// Template bodies of world.hpp: construction, the scheduler, the rendezvous check and the reduce
// orders. The collectives are in world_collectives-inl.hpp. Included by world.cpp (float,
// double), world_mp.cpp (Mp), world_narrow.cpp (NarrowFloat) and world_qd.cpp (Dd, Qd).
#pragma once

#include <algorithm>
#include <sstream>

#include "core/error.hpp"
#include "core/parallel.hpp"
#include "core/scalar.hpp"
#include "core/world.hpp"

namespace shardsim {

template <typename T>
World<T>::World(Mesh mesh, ReduceOrder order, Schedule schedule,
                std::shared_ptr<const Transport> transport)
    : shared_(std::make_shared<Shared>()) {
  shared_->visit_order = schedule_order(schedule, mesh.size());
  if (transport) {
    const int processes = transport->processes();
    if (processes > mesh.size()) {
      throw InputError(std::to_string(processes) + " processes for a mesh of " +
                       std::to_string(mesh.size()) + " ranks (" + mesh.str() +
                       "): run with at most as many processes as ranks");
    }
    const RankBlock block = rank_block(transport->process(), processes, mesh.size());
    mesh = mesh.held_only(block.begin, block.end);
    std::erase_if(shared_->visit_order, [&](int r) { return !mesh.holds(r); });
  }
  shared_->mesh = std::make_shared<const Mesh>(std::move(mesh));
  shared_->order = order;
  shared_->transport = std::move(transport);
}

template <typename T>
World<T>::World(int ranks, ReduceOrder order, Schedule schedule)
    : World(Mesh(ranks), order, schedule) {}

template <typename T>
World<T> World<T>::on(int dim) const {
  SHARDSIM_ASSERT(dim >= 0 && dim < mesh().ndim(), "World::on: a dim of the mesh");
  World out = *this;
  out.dim_ = dim;
  return out;
}

template <typename T>
void World<T>::for_each_rank(const std::function<void(int rank)>& body) const {
  // Ranks are handed out in visit order; with more than one thread they run concurrently, which
  // the rank programs' locality (invariant 1) makes safe and order-independent.
  const std::vector<int>& order = shared_->visit_order;
  parallel_for(static_cast<std::int64_t>(order.size()),
               [&](std::int64_t i) { body(order[static_cast<std::size_t>(i)]); });
}

template <typename T>
void World<T>::report(BoundaryLabel label, std::string_view default_op, const DistTensor<T>& in,
                      DistTensor<T>& out) const {
  if (label.op.empty()) label.op = std::string(default_op);
  if (label.tensor.empty()) label.tensor = out.name;
  if (label.inputs.empty()) label.inputs = {in.name};
  if (label.kind == BoundaryKind::op) label.kind = BoundaryKind::collective;
  // On an N-D mesh a collective names the mesh dim whose groups ran it: "all_reduce[dp]".
  if (mesh().ndim() > 1) label.op += "[" + mesh().dim(dim_).name + "]";
  if (shared_->hook) shared_->hook(label, out);
}

template <typename T>
bool World<T>::compare_boundary(const BoundaryLabel& label, DistTensor<T>& tensor) const {
  return shared_->hook ? shared_->hook(label, tensor) : false;
}

template <typename T>
void World<T>::check_group(std::string_view collective, const std::vector<int>& group,
                           const DistTensor<T>& in, const Layout& to) const {
  std::vector<CallDesc> calls;
  for (int r : group) {
    calls.push_back({r, std::string(collective), ScalarTraits<T>::name, in.global, in.layout, to,
                     in.local(r).shape()});
  }
  rendezvous(group, calls);
}

template <typename T>
void World<T>::rendezvous(const std::vector<int>& group, const std::vector<CallDesc>& calls) const {
  // Every member must arrive exactly once: a duplicate would hide a missing rank.
  const int members = static_cast<int>(group.size());
  std::vector<int> arrivals(group.size(), 0);
  std::string strangers;
  for (const CallDesc& call : calls) {
    const auto at = std::find(group.begin(), group.end(), call.rank);
    if (at != group.end()) {
      ++arrivals[static_cast<std::size_t>(at - group.begin())];
    } else {
      strangers += " " + std::to_string(call.rank);
    }
  }
  std::string missing;
  std::string repeated;
  for (int c = 0; c < members; ++c) {
    const std::string rank = " " + std::to_string(group[static_cast<std::size_t>(c)]);
    if (arrivals[static_cast<std::size_t>(c)] == 0) missing += rank;
    if (arrivals[static_cast<std::size_t>(c)] > 1) repeated += rank;
  }
  if (static_cast<int>(calls.size()) != members || !missing.empty() || !repeated.empty() ||
      !strangers.empty()) {
    std::ostringstream msg;
    msg << "rendezvous: " << calls.size() << " calls for " << members << " ranks;";
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
    // A ring hop and a boundary gather move buffers as they are (check_ring, share).
    if (call.collective == "ring_send_recv" || call.collective == "boundary") continue;
    const Shape expected = local_shape(call.global, call.from, mesh(), call.rank);
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
  SHARDSIM_ASSERT(k == group_size(), "reduce_sum needs one addend per group member");
  std::vector<T> out(static_cast<std::size_t>(n), T(0));
  // One hop: a + b, rounded by rounding_sums' function when there is one.
  auto add = [this](T& sum, const T& addend) {
    sum += addend;
    if (round_) round_(sum);
  };
  switch (shared_->order) {
    case ReduceOrder::rank:
      for (std::int64_t e = 0; e < n; ++e) {
        T sum = addends[0][e];
        for (int r = 1; r < k; ++r) add(sum, addends[static_cast<std::size_t>(r)][e]);
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
          add(sum, addends[static_cast<std::size_t>(r)][e]);
        }
        out[static_cast<std::size_t>(e)] = sum;
      }
      break;
    }
    case ReduceOrder::tree: {
      std::function<T(int, int, std::int64_t)> tree_sum = [&](int lo, int hi, std::int64_t e) {
        if (hi - lo == 1) return T(addends[static_cast<std::size_t>(lo)][e]);
        const int mid = lo + (hi - lo + 1) / 2;
        T sum = tree_sum(lo, mid, e);
        add(sum, tree_sum(mid, hi, e));
        return sum;
      };
      for (std::int64_t e = 0; e < n; ++e) out[static_cast<std::size_t>(e)] = tree_sum(0, k, e);
      break;
    }
  }
  return out;
}

}  // namespace shardsim

#include "core/world_collectives-inl.hpp"
#include "core/world_transport-inl.hpp"
