// Placements, layouts on a device mesh, and the split policies that decide who owns which slice.
//
// A Placement says how one mesh dim holds a tensor:
//   Shard(axis, split)  each rank holds a slice of `axis` (contiguous but for zigzag)
//   Replicate           each rank holds the whole tensor
//   Partial(sum)        each rank holds an addend; the tensor is their sum
//
// Split policies for an axis of extent n over k ranks:
//   chunk     torch.chunk: c = ceil(n/k), rank r owns [min(n, r*c), min(n, (r+1)*c)).
//             13/4 -> 4,4,4,1; 5/4 -> 2,2,1,0; 3/4 -> 1,1,1,0 (trailing ranks may be empty).
//   balanced  torch.tensor_split: the first n%k ranks own floor(n/k)+1. 13/4 -> 4,3,3,3.
//   padded    the axis is padded to k*c (c = ceil(n/k)); every rank holds c positions, of which
//             those at global index >= n are padding: invalid, zero-filled, never compared.
//   zigzag    load-balanced causal context parallelism (PyTorch's _RoundRobinLoadBalancer,
//             torch/distributed/tensor/experimental/_attention.py): the axis is cut into 2k
//             pieces with torch.chunk (c = ceil(n/2k), piece p = [min(n, p c), min(n, (p+1) c)))
//             and rank r holds pieces r and 2k-1-r, in that order (PyTorch asserts 2k | n; the
//             uneven case follows torch.chunk of the pieces, so trailing pieces may be short or
//             empty). 13/2 (c = 4): rank 0 holds [0:4)+[12:13), rank 1 [4:8)+[8:12) = [4:12)
//             (adjacent runs merge); 16/2: [0:4)+[12:16) and [4:12). A zigzag dim must be the
//             only dim that shards its axis (no nesting).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/mesh.hpp"
#include "core/shape.hpp"

namespace shardsim {

enum class SplitPolicy { chunk, balanced, padded, zigzag };

std::string_view split_name(SplitPolicy split);

// One rank's share of a sharded axis: global positions [begin, end), then (zigzag only) a second
// run [second_begin, second_end) that follows the first in local order, second_begin > end;
// the second run is empty (0, 0) otherwise. The local extent may exceed the valid count by
// trailing pad positions (padded split only).
struct Slice {
  std::int64_t begin = 0;
  std::int64_t end = 0;
  std::int64_t local_extent = 0;
  std::int64_t second_begin = 0;
  std::int64_t second_end = 0;

  std::int64_t first_valid() const { return end - begin; }
  std::int64_t valid() const { return first_valid() + second_end - second_begin; }
  std::int64_t pad() const { return local_extent - valid(); }
  bool contiguous() const { return second_end == second_begin; }
  // Whether global position g is one of this share's real positions.
  bool holds(std::int64_t g) const {
    return (g >= begin && g < end) || (g >= second_begin && g < second_end);
  }
  friend bool operator==(const Slice&, const Slice&) = default;
};

// A run of consecutive positions of a share: global [begin, end) at local index `local`.
struct SliceRun {
  std::int64_t begin = 0;
  std::int64_t end = 0;
  std::int64_t local = 0;
};
// The non-empty runs of a share, in local order (none, one, or two for a zigzag share).
std::vector<SliceRun> slice_runs(const Slice& slice);

// REQUIRES: extent >= 0, ranks >= 1. Returns one Slice per rank, in rank order.
std::vector<Slice> shard_slices(std::int64_t extent, int ranks, SplitPolicy split);

struct Placement {
  enum class Kind { shard, replicate, partial };
  Kind kind = Kind::replicate;
  std::string axis;                        // shard only
  SplitPolicy split = SplitPolicy::chunk;  // shard only

  static Placement shard(std::string axis, SplitPolicy split = SplitPolicy::chunk) {
    return {Kind::shard, std::move(axis), split};
  }
  static Placement replicate() { return {}; }
  static Placement partial() { return {Kind::partial, {}, SplitPolicy::chunk}; }

  bool is_shard() const { return kind == Kind::shard; }
  bool is_replicate() const { return kind == Kind::replicate; }
  bool is_partial() const { return kind == Kind::partial; }

  // "Shard(seq)", "Shard(seq, balanced)", "Replicate", "Partial(sum)"
  std::string str() const;
  friend bool operator==(const Placement&, const Placement&) = default;
};

// An axis or mesh dim name: non-empty, letters, digits and _ only.
bool is_axis_name(std::string_view name);

// Parses the str() forms. Throws InputError (without location; the caller adds it).
Placement parse_placement(std::string_view text);

// Rank `rank`'s local shape of a tensor with global shape `global`.
Shape local_shape(const Shape& global, const Placement& placement, int ranks, int rank);

// Rank `rank`'s slice along the sharded axis. REQUIRES: placement.is_shard().
Slice rank_slice(const Shape& global, const Placement& placement, int ranks, int rank);

// The local<->global identity along a sharded axis: local position i of `slice` is global
// position slice.begin + i when i < first_valid(), second_begin + (i - first_valid()) when
// first_valid() <= i < valid() (zigzag), and padding otherwise.
inline bool is_pad(const Slice& slice, std::int64_t local) { return local >= slice.valid(); }
inline std::int64_t to_global(const Slice& slice, std::int64_t local) {
  const std::int64_t first = slice.first_valid();
  return local < first ? slice.begin + local : slice.second_begin + (local - first);
}
// The global positions of a share's valid local positions, in local order.
std::vector<std::int64_t> slice_positions(const Slice& slice);
// Which rank owns global position `global` of a sharded axis. REQUIRES: 0 <= global < extent.
int owner_of(const std::vector<Slice>& slices, std::int64_t global);

// "seq[12:13)", "seq[12:13)+3pad", or for a zigzag share "seq[0:4)+[12:13)"
std::string slice_str(std::string_view axis, const Slice& slice);
// The golden-name form: "12:13", "12:13+3pad", or for a zigzag share "0:4+12:13".
std::string slice_label_str(const Slice& slice);

// ---- Layouts on an N-D mesh (DTensor's rules) ----
//
// A Layout has one Placement per mesh dim, outermost first. A rank's local tensor is found by
// applying the dims in order: Shard(a, split) on dim d cuts the current local extent of axis a
// into size(d) pieces with `split` and keeps the piece at the rank's coordinate on d, so two dims
// sharding the same axis nest (the later dim splits the earlier dim's piece). The global offset
// of a rank along an axis is the sum of the offsets its pieces start at. A Partial dim holds
// addends: the tensor is the sum over that dim's groups. Padding (a padded split) is trailing
// within every piece; a rank's share of an axis is always a valid prefix then pad positions.
struct Layout {
  std::vector<Placement> dims;

  Layout() = default;
  explicit Layout(std::vector<Placement> placements) : dims(std::move(placements)) {}
  // The same placement on every one of `ndim` dims.
  static Layout uniform(int ndim, const Placement& placement);

  int ndim() const { return static_cast<int>(dims.size()); }
  const Placement& on(int dim) const { return dims[static_cast<std::size_t>(dim)]; }
  Layout with(int dim, Placement placement) const;
  bool is_replicate() const;  // Replicate on every dim
  bool has_partial() const;
  bool shards(std::string_view axis) const;  // some dim shards `axis`
  bool has_padding() const;                  // some dim shards with the padded split
  // "" when the layout is well formed on `mesh`, else why not: a zigzag dim shares its axis with
  // another dim (zigzag shares cannot nest). REQUIRES: ndim() == mesh.ndim().
  std::string problem(const Mesh& mesh) const;
  // 1-D: the placement's own form ("Shard(seq)"); N-D: "[Replicate, Shard(seq), Shard(hidden)]".
  std::string str() const;
  friend bool operator==(const Layout&, const Layout&) = default;
};

// Rank `rank`'s share of `axis`: global [begin, end) and its local extent (pads after). An axis
// no dim shards gives {0, extent, extent}. REQUIRES: layout.ndim() == mesh.ndim().
Slice axis_slice(const Shape& global, const Layout& layout, const Mesh& mesh, int rank,
                 std::string_view axis);
// The inverse of Layout::str() for a mesh of `ndim` dims: "Shard(seq)" when ndim is 1, else
// "[Replicate, Shard(seq), Partial(sum)]" with exactly ndim entries. Throws InputError.
Layout parse_layout(std::string_view text, int ndim);
Shape local_shape(const Shape& global, const Layout& layout, const Mesh& mesh, int rank);

}  // namespace shardsim
