// Template bodies of the world's transport side (world.hpp): the exchange of calls and buffers
// between processes that every collective, ring hop and boundary gather starts with. With the
// local transport nothing here moves data. Included by world-inl.hpp.
#pragma once

#include "core/wire.hpp"
#include "core/wire_mp.hpp"  // Mp values travel exactly (any TU may instantiate World<Mp>)
#include "core/world.hpp"

namespace shardsim {

template <typename T>
bool World<T>::serves(const std::vector<int>& group) const {
  for (int r : group) {
    if (holds(r)) return true;
  }
  return false;
}

template <typename T>
std::vector<Tensor<T>> World<T>::fetch(const DistTensor<T>& in, std::string_view collective,
                                       const Layout& to) const {
  const std::vector<std::vector<int>> groups = mesh().groups(dim_);
  if (!transport()) {
    for (const std::vector<int>& group : groups) check_group(collective, group, in, to);
    return {};
  }
  std::vector<CallDesc> mine;
  for (int r = mesh().held_begin(); r < mesh().held_end(); ++r) {
    mine.push_back({r, std::string(collective), ScalarTraits<T>::name, in.global, in.layout, to,
                    in.local(r).shape()});
  }
  const int processes = transport()->processes();
  // Rank r's buffer goes to every process that holds a member of r's group.
  const Wants wants = [&](int r, int p) {
    const RankBlock block = rank_block(p, processes, size());
    for (int member : mesh().group_of(r, dim_)) {
      if (member >= block.begin && member < block.end) return true;
    }
    return false;
  };
  std::vector<CallDesc> calls;
  std::vector<Tensor<T>> remote =
      deliver(mine, [&](int r) -> const Tensor<T>& { return in.local(r); }, wants, calls);
  for (const std::vector<int>& group : groups) {
    std::vector<CallDesc> of_group;
    for (int r : group) {
      if (calls[static_cast<std::size_t>(r)].rank >= 0) of_group.push_back(calls[static_cast<std::size_t>(r)]);
    }
    rendezvous(group, of_group);
  }
  return remote;
}

template <typename T>
std::vector<Tensor<T>> World<T>::deliver(const std::vector<CallDesc>& calls,
                                         const std::function<const Tensor<T>&(int rank)>& tensor,
                                         const Wants& wants,
                                         std::vector<CallDesc>& all_calls) const {
  const Transport& link = *transport();
  const int processes = link.processes();
  const int me = link.process();
  std::vector<std::string> outbox(static_cast<std::size_t>(processes));
  for (int p = 0; p < processes; ++p) {
    if (p == me) continue;
    WireWriter w(outbox[static_cast<std::size_t>(p)]);
    w.u64(static_cast<std::uint64_t>(size()));
    w.u64(calls.size());
    for (const CallDesc& c : calls) {
      w.i64(c.rank);
      w.str(c.collective);
      w.str(c.dtype);
      w.shape(c.global);
      w.layout(c.from);
      w.layout(c.to);
      w.shape(c.local);
    }
    std::vector<int> sent;
    for (int r = mesh().held_begin(); r < mesh().held_end(); ++r) {
      if (wants(r, p)) sent.push_back(r);
    }
    w.u64(sent.size());
    for (int r : sent) {
      w.i64(r);
      put_tensor(w, tensor(r));
    }
  }
  const std::vector<std::string> inbox = link.exchange(std::move(outbox));
  all_calls.assign(static_cast<std::size_t>(size()), CallDesc{});
  std::vector<bool> arrived(static_cast<std::size_t>(size()), false);
  for (const CallDesc& c : calls) {
    all_calls[static_cast<std::size_t>(c.rank)] = c;
    arrived[static_cast<std::size_t>(c.rank)] = true;
  }
  std::vector<Tensor<T>> received(static_cast<std::size_t>(size()));
  for (int p = 0; p < processes; ++p) {
    if (p == me) continue;
    WireReader r(inbox[static_cast<std::size_t>(p)]);
    const std::uint64_t ranks = r.u64();
    if (ranks != static_cast<std::uint64_t>(size())) {
      throw RendezvousError("rendezvous mismatch: process " + std::to_string(p) +
                            " runs a mesh of " + std::to_string(ranks) + " ranks but process " +
                            std::to_string(me) + " runs " + std::to_string(size()));
    }
    const RankBlock block = rank_block(p, processes, size());
    for (std::size_t n = r.count(1u << 30), i = 0; i < n; ++i) {
      CallDesc c;
      c.rank = static_cast<int>(r.i64());
      c.collective = r.str();
      c.dtype = r.str();
      c.global = r.shape();
      c.from = r.layout();
      c.to = r.layout();
      c.local = r.shape();
      if (c.rank < block.begin || c.rank >= block.end) {
        throw TransportError("process " + std::to_string(p) + " sent a call for rank " +
                             std::to_string(c.rank) + ", which it does not hold");
      }
      arrived[static_cast<std::size_t>(c.rank)] = true;
      all_calls[static_cast<std::size_t>(c.rank)] = std::move(c);
    }
    for (std::size_t n = r.count(1u << 30), i = 0; i < n; ++i) {
      const std::int64_t rank = r.i64();
      if (rank < block.begin || rank >= block.end) throw TransportError("wire: a stray buffer");
      received[static_cast<std::size_t>(rank)] = get_tensor<T>(r);
    }
  }
  for (int rank = 0; rank < size(); ++rank) {
    if (!arrived[static_cast<std::size_t>(rank)]) all_calls[static_cast<std::size_t>(rank)].rank = -1;
  }
  return received;
}

template <typename T>
DistTensor<T> World<T>::share(const DistTensor<T>& x, bool to_root) const {
  // A tensor on a mesh every process holds whole (a checker's, built from metadata alike on every
  // process, like the dropout repetition verdict) is already everywhere.
  if (!transport() || x.mesh->holds_all()) return x;
  std::vector<CallDesc> mine;
  for (int r = mesh().held_begin(); r < mesh().held_end(); ++r) {
    mine.push_back({r, "boundary", ScalarTraits<T>::name, x.global, x.layout, x.layout,
                    x.local(r).shape()});
  }
  std::vector<CallDesc> calls;
  std::vector<Tensor<T>> remote = deliver(
      mine, [&](int r) -> const Tensor<T>& { return x.local(r); },
      [&](int, int p) { return !to_root || p == 0; }, calls);
  std::vector<int> everyone;
  for (int r = 0; r < size(); ++r) everyone.push_back(r);
  std::erase_if(calls, [](const CallDesc& c) { return c.rank < 0; });
  rendezvous(everyone, calls);
  if (to_root && transport()->process() != 0) return x;
  DistTensor<T> out{x.name, x.global, x.layout,
                    std::make_shared<const Mesh>(x.mesh->held_only(0, size())), {}};
  out.locals.resize(static_cast<std::size_t>(size()));
  for (int r = 0; r < size(); ++r) {
    out.local(r) = holds(r) ? x.local(r) : std::move(remote[static_cast<std::size_t>(r)]);
  }
  return out;
}

template <typename T>
std::string World<T>::from_root(std::string message) const {
  return from_process0(transport(), std::move(message));
}

template <typename T>
std::vector<std::int64_t> World<T>::from_owners(std::vector<std::int64_t> values) const {
  if (!transport()) return values;
  SHARDSIM_ASSERT(static_cast<int>(values.size()) == size(), "from_owners: one entry per rank");
  std::string mine;
  WireWriter w(mine);
  for (int r = mesh().held_begin(); r < mesh().held_end(); ++r) {
    w.i64(values[static_cast<std::size_t>(r)]);
  }
  const int processes = transport()->processes();
  const std::vector<std::string> inbox =
      transport()->exchange(std::vector<std::string>(static_cast<std::size_t>(processes), mine));
  for (int p = 0; p < processes; ++p) {
    WireReader r(inbox[static_cast<std::size_t>(p)]);
    const RankBlock block = rank_block(p, processes, size());
    for (int rank = block.begin; rank < block.end; ++rank) {
      values[static_cast<std::size_t>(rank)] = r.i64();
    }
    if (!r.done()) throw TransportError("process " + std::to_string(p) + ": a stray figure");
  }
  return values;
}

template <typename T>
void World<T>::check_ring(const std::vector<Shape>& shapes) const {
  for (const std::vector<int>& group : mesh().groups(dim_)) {
    const Shape& first = shapes[static_cast<std::size_t>(group.front())];
    std::string differ;
    for (int r : group) {
      const Shape& mine = shapes[static_cast<std::size_t>(r)];
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
  }
}

}  // namespace shardsim
