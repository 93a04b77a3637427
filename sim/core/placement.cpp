#include "core/placement.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace shardsim {

std::string_view split_name(SplitPolicy split) {
  switch (split) {
    case SplitPolicy::chunk: return "chunk";
    case SplitPolicy::balanced: return "balanced";
    case SplitPolicy::padded: return "padded";
    case SplitPolicy::zigzag: return "zigzag";
  }
  return "?";
}

namespace {

// Rank r of k holds torch.chunk pieces r and 2k-1-r of 2k (placement.hpp); adjacent runs merge
// and an empty run is dropped, so a share is two runs only when there is a gap between them.
std::vector<Slice> zigzag_slices(std::int64_t extent, int ranks) {
  const std::vector<Slice> pieces = shard_slices(extent, 2 * ranks, SplitPolicy::chunk);
  std::vector<Slice> slices(static_cast<std::size_t>(ranks));
  for (std::size_t r = 0; r < slices.size(); ++r) {
    const Slice& first = pieces[r];
    const Slice& second = pieces[pieces.size() - 1 - r];
    Slice& share = slices[r];
    share = {first.begin, first.end, first.valid() + second.valid()};
    if (second.valid() == 0) continue;
    if (first.valid() == 0) {
      share.begin = second.begin;
      share.end = second.end;
    } else if (second.begin == first.end) {
      share.end = second.end;
    } else {
      share.second_begin = second.begin;
      share.second_end = second.end;
    }
  }
  return slices;
}

}  // namespace

std::vector<Slice> shard_slices(std::int64_t extent, int ranks, SplitPolicy split) {
  SHARDSIM_ASSERT(extent >= 0 && ranks >= 1, "shard_slices domain");
  if (split == SplitPolicy::zigzag) return zigzag_slices(extent, ranks);
  std::vector<Slice> slices(static_cast<std::size_t>(ranks));
  const std::int64_t k = ranks;
  if (split == SplitPolicy::balanced) {
    const std::int64_t base = extent / k;
    const std::int64_t extra = extent % k;
    std::int64_t begin = 0;
    for (std::int64_t r = 0; r < k; ++r) {
      const std::int64_t size = base + (r < extra ? 1 : 0);
      slices[r] = {begin, begin + size, size};
      begin += size;
    }
    return slices;
  }
  const std::int64_t chunk = (extent + k - 1) / k;
  for (std::int64_t r = 0; r < k; ++r) {
    const std::int64_t begin = std::min(extent, r * chunk);
    const std::int64_t end = std::min(extent, (r + 1) * chunk);
    slices[r] = {begin, end, split == SplitPolicy::padded ? chunk : end - begin};
  }
  return slices;
}

std::string Placement::str() const {
  switch (kind) {
    case Kind::replicate: return "Replicate";
    case Kind::partial: return "Partial(sum)";
    case Kind::shard:
      if (split == SplitPolicy::chunk) return "Shard(" + axis + ")";
      return "Shard(" + axis + ", " + std::string(split_name(split)) + ")";
  }
  return "?";
}

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

}  // namespace

bool is_axis_name(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!(c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')))
      return false;
  }
  return true;
}

Placement parse_placement(std::string_view text) {
  const std::string_view s = trim(text);
  const std::string usage =
      "expected Replicate, Partial(sum), Shard(AXIS) or Shard(AXIS, chunk|balanced|padded|zigzag)";
  if (s == "Replicate") return Placement::replicate();
  if (s == "Partial(sum)" || s == "Partial") return Placement::partial();
  if (s.size() > 7 && s.substr(0, 6) == "Shard(" && s.back() == ')') {
    std::string_view inner = s.substr(6, s.size() - 7);
    std::string_view axis = inner;
    SplitPolicy split = SplitPolicy::chunk;
    if (auto comma = inner.find(','); comma != std::string_view::npos) {
      axis = inner.substr(0, comma);
      const std::string_view policy = trim(inner.substr(comma + 1));
      if (policy == "chunk") {
        split = SplitPolicy::chunk;
      } else if (policy == "balanced") {
        split = SplitPolicy::balanced;
      } else if (policy == "padded") {
        split = SplitPolicy::padded;
      } else if (policy == "zigzag") {
        split = SplitPolicy::zigzag;
      } else {
        throw InputError("placement " + quote(std::string(s)) + ": unknown split policy '" +
                         std::string(policy) + "' (known: chunk, balanced, padded, zigzag)");
      }
    }
    axis = trim(axis);
    if (is_axis_name(axis)) return Placement::shard(std::string(axis), split);
  }
  throw InputError("invalid placement " + quote(std::string(s)) + ": " + usage);
}

Slice rank_slice(const Shape& global, const Placement& placement, int ranks, int rank) {
  SHARDSIM_ASSERT(placement.is_shard(), "rank_slice needs a Shard placement");
  return shard_slices(global.extent(placement.axis), ranks, placement.split)[rank];
}

Shape local_shape(const Shape& global, const Placement& placement, int ranks, int rank) {
  if (!placement.is_shard()) return global;
  return global.with_extent(placement.axis,
                            rank_slice(global, placement, ranks, rank).local_extent);
}

std::vector<SliceRun> slice_runs(const Slice& slice) {
  std::vector<SliceRun> runs;
  if (slice.first_valid() > 0) runs.push_back({slice.begin, slice.end, 0});
  if (!slice.contiguous()) {
    runs.push_back({slice.second_begin, slice.second_end, slice.first_valid()});
  }
  return runs;
}

std::vector<std::int64_t> slice_positions(const Slice& slice) {
  std::vector<std::int64_t> out;
  out.reserve(static_cast<std::size_t>(slice.valid()));
  for (const SliceRun& run : slice_runs(slice)) {
    for (std::int64_t g = run.begin; g < run.end; ++g) out.push_back(g);
  }
  return out;
}

int owner_of(const std::vector<Slice>& slices, std::int64_t global) {
  for (std::size_t r = 0; r < slices.size(); ++r) {
    if (slices[r].holds(global)) return static_cast<int>(r);
  }
  SHARDSIM_ASSERT(false, "global position owned by no rank");
  return -1;
}

std::string slice_str(std::string_view axis, const Slice& slice) {
  std::string out = std::string(axis) + "[" + std::to_string(slice.begin) + ":" +
                    std::to_string(slice.end) + ")";
  if (!slice.contiguous()) {
    out += "+[" + std::to_string(slice.second_begin) + ":" + std::to_string(slice.second_end) + ")";
  }
  if (slice.pad() > 0) out += "+" + std::to_string(slice.pad()) + "pad";
  return out;
}

std::string slice_label_str(const Slice& slice) {
  std::string out = std::to_string(slice.begin) + ":" + std::to_string(slice.end);
  if (!slice.contiguous()) {
    out += "+" + std::to_string(slice.second_begin) + ":" + std::to_string(slice.second_end);
  }
  if (slice.pad() > 0) out += "+" + std::to_string(slice.pad()) + "pad";
  return out;
}

}  // namespace shardsim

namespace shardsim {

Layout Layout::uniform(int ndim, const Placement& placement) {
  return Layout(std::vector<Placement>(static_cast<std::size_t>(ndim), placement));
}

Layout Layout::with(int dim, Placement placement) const {
  Layout out = *this;
  out.dims[static_cast<std::size_t>(dim)] = std::move(placement);
  return out;
}

bool Layout::is_replicate() const {
  for (const Placement& p : dims) {
    if (!p.is_replicate()) return false;
  }
  return true;
}

bool Layout::has_partial() const {
  for (const Placement& p : dims) {
    if (p.is_partial()) return true;
  }
  return false;
}

bool Layout::has_padding() const {
  for (const Placement& p : dims) {
    if (p.is_shard() && p.split == SplitPolicy::padded) return true;
  }
  return false;
}

bool Layout::shards(std::string_view axis) const {
  for (const Placement& p : dims) {
    if (p.is_shard() && p.axis == axis) return true;
  }
  return false;
}

std::string Layout::problem(const Mesh& mesh) const {
  for (std::size_t d = 0; d < dims.size(); ++d) {
    const Placement& p = dims[d];
    if (!p.is_shard() || p.split != SplitPolicy::zigzag) continue;
    for (std::size_t e = 0; e < dims.size(); ++e) {
      if (e != d && dims[e].is_shard() && dims[e].axis == p.axis) {
        const int first = static_cast<int>(std::min(d, e)), second = static_cast<int>(std::max(d, e));
        return "mesh dims '" + mesh.dim(first).name + "' and '" + mesh.dim(second).name +
               "' both shard '" + p.axis + "', and a zigzag share cannot nest with another (shard '" +
               p.axis + "' on one dim only)";
      }
    }
  }
  return "";
}

std::string Layout::str() const {
  if (dims.size() == 1) return dims.front().str();
  std::string out = "[";
  for (std::size_t d = 0; d < dims.size(); ++d) out += (d ? ", " : "") + dims[d].str();
  return out + "]";
}

Layout parse_layout(std::string_view text, int ndim) {
  if (ndim == 1) return Layout({parse_placement(text)});
  if (text.size() < 2 || text.front() != '[' || text.back() != ']') {
    throw InputError("expected a list of " + std::to_string(ndim) +
                     " placements, e.g. [Replicate, Shard(seq)]");
  }
  std::vector<Placement> dims;
  std::string_view rest = text.substr(1, text.size() - 2);
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= rest.size(); ++i) {
    if (i < rest.size() && rest[i] == '(') ++depth;
    if (i < rest.size() && rest[i] == ')') --depth;
    if (i == rest.size() || (rest[i] == ',' && depth == 0)) {
      std::string_view item = rest.substr(start, i - start);
      while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
      dims.push_back(parse_placement(item));
      start = i + 1;
    }
  }
  if (static_cast<int>(dims.size()) != ndim) {
    throw InputError("expected " + std::to_string(ndim) + " placements, one per mesh dim, got " +
                     std::to_string(dims.size()));
  }
  return Layout(std::move(dims));
}

Slice axis_slice(const Shape& global, const Layout& layout, const Mesh& mesh, int rank,
                 std::string_view axis) {
  SHARDSIM_ASSERT(layout.ndim() == mesh.ndim(), "one placement per mesh dim");
  const std::int64_t extent = global.extent(axis);
  Slice share{0, extent, extent};
  for (int d = 0; d < mesh.ndim(); ++d) {
    const Placement& p = layout.on(d);
    if (!p.is_shard() || p.axis != axis) continue;
    // Split the current local extent; positions past the current valid count are padding.
    const Slice piece =
        shard_slices(share.local_extent, mesh.dim(d).size, p.split)[mesh.coord(rank, d)];
    if (p.split == SplitPolicy::zigzag || !share.contiguous()) {
      SHARDSIM_ASSERT(share == (Slice{0, extent, extent}), "a zigzag share does not nest");
      share = piece;
      continue;
    }
    const std::int64_t valid = share.valid();
    share = {share.begin + std::min(piece.begin, valid), share.begin + std::min(piece.end, valid),
             piece.local_extent};
  }
  return share;
}

Shape local_shape(const Shape& global, const Layout& layout, const Mesh& mesh, int rank) {
  Shape local = global;
  for (const Axis& axis : global.axes()) {
    if (layout.shards(axis.name)) {
      local = local.with_extent(axis.name,
                                axis_slice(global, layout, mesh, rank, axis.name).local_extent);
    }
  }
  return local;
}

}  // namespace shardsim
