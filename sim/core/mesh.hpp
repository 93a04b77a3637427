// The mesh vocabulary a scenario names without needing the world: the device mesh (named
// dims, rank coordinates, the groups collectives run in), how collectives order their sums and
// how local phases visit the ranks.
//
// Device mesh: an ordered list of named dims, outermost first, e.g. dp=2, cp=2, tp=2. A global
// rank has one coordinate per dim, row-major: rank = (c_0 * s_1 + c_1) * s_2 + c_2. A group of
// dim d is the set of ranks that share every coordinate but the one on d, listed by their
// coordinate on d; a collective on d runs in every group of d. The 1-D form `ranks = N` is one
// dim named "world".
//
// Reduce orders (the elementwise sum of the ranks' addends x_0..x_{k-1}):
//   rank  ((x_0 + x_1) + x_2) + ... + x_{k-1}
//   ring  the flat buffer of n elements is cut into k chunks (torch.chunk, c = ceil(n/k)); an
//         element of chunk j is summed starting at rank (j+1) mod k and going around the ring,
//         ending at rank j, as in NCCL's ring reduce-scatter.
//   tree  pairwise halving: sum[lo,hi) = sum[lo,mid) + sum[mid,hi), mid = lo + ceil((hi-lo)/2).
// The sum is computed once and copied, so every rank receives bitwise the same result.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace shardsim {

struct MeshDim {
  std::string name;
  int size = 1;
  friend bool operator==(const MeshDim&, const MeshDim&) = default;
};

class Mesh {
 public:
  // The 1-D mesh of one rank.
  Mesh() : Mesh(1) {}
  // The 1-D mesh of `ranks` ranks, dim "world". REQUIRES: ranks >= 1.
  explicit Mesh(int ranks);
  // REQUIRES: at least one dim, every size >= 1, names unique and non-empty.
  explicit Mesh(std::vector<MeshDim> dims);

  int size() const { return size_; }  // the number of ranks
  int ndim() const { return static_cast<int>(dims_.size()); }
  const std::vector<MeshDim>& dims() const { return dims_; }
  const MeshDim& dim(int d) const { return dims_[static_cast<std::size_t>(d)]; }
  int find_dim(std::string_view name) const;  // -1 when absent

  // REQUIRES: 0 <= rank < size(), 0 <= d < ndim().
  int coord(int rank, int d) const;
  std::vector<int> coords(int rank) const;
  int rank_of(const std::vector<int>& coords) const;
  // The rank with `rank`'s coordinates but `c` on dim d.
  int with_coord(int rank, int d, int c) const;
  // The groups of dim d, each listed by coordinate on d; groups in order of their first rank.
  std::vector<std::vector<int>> groups(int d) const;
  // The group of dim d that `rank` belongs to, listed by coordinate on d.
  std::vector<int> group_of(int rank, int d) const;

  std::string str() const;         // "dp=2, cp=2, tp=2"
  std::string coords_str(int rank) const;  // "dp=0, cp=1, tp=1"
  // The ranks this process holds (transport.hpp): [held_begin, held_end), every rank unless a
  // transport spreads the mesh over processes. A DistTensor allocates only held ranks' locals.
  // Not part of the mesh's identity (operator== ignores it).
  bool holds(int rank) const { return rank >= held_begin_ && rank < held_end_; }
  bool holds_all() const { return held_begin_ == 0 && held_end_ == size_; }
  int held_begin() const { return held_begin_; }
  int held_end() const { return held_end_; }
  // This mesh, held in part. REQUIRES: 0 <= begin <= end <= size().
  Mesh held_only(int begin, int end) const;
  friend bool operator==(const Mesh& a, const Mesh& b) { return a.dims_ == b.dims_; }

 private:
  std::vector<MeshDim> dims_;
  int size_ = 1;
  int held_begin_ = 0;
  int held_end_ = 1;
};

enum class ReduceOrder { rank, ring, tree };
std::string_view reduce_order_name(ReduceOrder order);
ReduceOrder parse_reduce_order(std::string_view text);  // throws InputError

struct Schedule {
  enum class Kind { rank, reverse, shuffle };
  Kind kind = Kind::rank;
  std::uint64_t seed = 0;  // shuffle only
  std::string str() const;  // "rank", "reverse", "shuffle:SEED"
};
Schedule parse_schedule(std::string_view text);  // throws InputError
// The order in which local phases visit the ranks. shuffle is Fisher-Yates driven by splitmix64
// from the seed, so it is reproducible.
std::vector<int> schedule_order(const Schedule& schedule, int ranks);

}  // namespace shardsim
