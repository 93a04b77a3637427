#include "core/mesh.hpp"

#include <algorithm>
#include <charconv>
#include <numeric>

#include "core/error.hpp"

namespace shardsim {

std::string_view reduce_order_name(ReduceOrder order) {
  switch (order) {
    case ReduceOrder::rank: return "rank";
    case ReduceOrder::ring: return "ring";
    case ReduceOrder::tree: return "tree";
  }
  return "?";
}

ReduceOrder parse_reduce_order(std::string_view text) {
  if (text == "rank") return ReduceOrder::rank;
  if (text == "ring") return ReduceOrder::ring;
  if (text == "tree") return ReduceOrder::tree;
  throw InputError("unknown reduce order " + quote(std::string(text)) +
                   " (known: rank, ring, tree)");
}

std::string Schedule::str() const {
  switch (kind) {
    case Kind::rank: return "rank";
    case Kind::reverse: return "reverse";
    case Kind::shuffle: return "shuffle:" + std::to_string(seed);
  }
  return "?";
}

Schedule parse_schedule(std::string_view text) {
  if (text == "rank") return {Schedule::Kind::rank, 0};
  if (text == "reverse") return {Schedule::Kind::reverse, 0};
  if (text.substr(0, 8) == "shuffle:") {
    std::uint64_t seed = 0;
    const std::string_view digits = text.substr(8);
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), seed);
    if (ec == std::errc() && end == digits.data() + digits.size() && !digits.empty()) {
      return {Schedule::Kind::shuffle, seed};
    }
  }
  throw InputError("unknown schedule '" + std::string(text) +
                   "' (known: rank, reverse, shuffle:SEED)");
}

std::vector<int> schedule_order(const Schedule& schedule, int ranks) {
  std::vector<int> order(static_cast<std::size_t>(ranks));
  std::iota(order.begin(), order.end(), 0);
  if (schedule.kind == Schedule::Kind::reverse) std::reverse(order.begin(), order.end());
  if (schedule.kind == Schedule::Kind::shuffle) {
    std::uint64_t state = schedule.seed;
    auto splitmix64 = [&state]() {
      std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
      return z ^ (z >> 31);
    };
    for (int i = ranks - 1; i > 0; --i) {
      const int j = static_cast<int>(splitmix64() % static_cast<std::uint64_t>(i + 1));
      std::swap(order[static_cast<std::size_t>(i)], order[static_cast<std::size_t>(j)]);
    }
  }
  return order;
}

}  // namespace shardsim

namespace shardsim {

Mesh::Mesh(int ranks) : Mesh(std::vector<MeshDim>{{"world", ranks}}) {}

Mesh::Mesh(std::vector<MeshDim> dims) : dims_(std::move(dims)) {
  SHARDSIM_ASSERT(!dims_.empty(), "a mesh has at least one dim");
  size_ = 1;
  for (std::size_t d = 0; d < dims_.size(); ++d) {
    SHARDSIM_ASSERT(dims_[d].size >= 1 && !dims_[d].name.empty(), "mesh dim size and name");
    for (std::size_t e = 0; e < d; ++e) {
      SHARDSIM_ASSERT(dims_[e].name != dims_[d].name, "mesh dim names are unique");
    }
    size_ *= dims_[d].size;
  }
  held_end_ = size_;
}

Mesh Mesh::held_only(int begin, int end) const {
  SHARDSIM_ASSERT(0 <= begin && begin <= end && end <= size_, "held ranks inside the mesh");
  Mesh out = *this;
  out.held_begin_ = begin;
  out.held_end_ = end;
  return out;
}

int Mesh::find_dim(std::string_view name) const {
  for (int d = 0; d < ndim(); ++d) {
    if (dim(d).name == name) return d;
  }
  return -1;
}

int Mesh::coord(int rank, int d) const {
  SHARDSIM_ASSERT(rank >= 0 && rank < size_ && d >= 0 && d < ndim(), "mesh coordinate domain");
  int inner = 1;
  for (int e = ndim() - 1; e > d; --e) inner *= dim(e).size;
  return (rank / inner) % dim(d).size;
}

std::vector<int> Mesh::coords(int rank) const {
  std::vector<int> out;
  for (int d = 0; d < ndim(); ++d) out.push_back(coord(rank, d));
  return out;
}

int Mesh::rank_of(const std::vector<int>& coords) const {
  SHARDSIM_ASSERT(static_cast<int>(coords.size()) == ndim(), "one coordinate per mesh dim");
  int rank = 0;
  for (int d = 0; d < ndim(); ++d) {
    SHARDSIM_ASSERT(coords[d] >= 0 && coords[d] < dim(d).size, "coordinate inside its dim");
    rank = rank * dim(d).size + coords[static_cast<std::size_t>(d)];
  }
  return rank;
}

int Mesh::with_coord(int rank, int d, int c) const {
  std::vector<int> at = coords(rank);
  at[static_cast<std::size_t>(d)] = c;
  return rank_of(at);
}

std::vector<int> Mesh::group_of(int rank, int d) const {
  std::vector<int> group;
  for (int c = 0; c < dim(d).size; ++c) group.push_back(with_coord(rank, d, c));
  return group;
}

std::vector<std::vector<int>> Mesh::groups(int d) const {
  std::vector<std::vector<int>> out;
  for (int rank = 0; rank < size_; ++rank) {
    if (coord(rank, d) == 0) out.push_back(group_of(rank, d));
  }
  return out;
}

std::string Mesh::str() const {
  std::string out;
  for (const MeshDim& d : dims_) {
    out += (out.empty() ? "" : ", ") + d.name + "=" + std::to_string(d.size);
  }
  return out;
}

std::string Mesh::coords_str(int rank) const {
  std::string out;
  for (int d = 0; d < ndim(); ++d) {
    out += (out.empty() ? "" : ", ") + dim(d).name + "=" + std::to_string(coord(rank, d));
  }
  return out;
}

}  // namespace shardsim
