// Position signatures along a sharded axis: rank_offset_gap, shard_edge_gap, shifted_copy.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "diagnosis/signatures.hpp"
#include "diagnosis/format.hpp"

namespace shardsim {

namespace {

using diag::num;

// The position along `axis` of global flat index `flat`.
std::int64_t position_of(const Shape& shape, const std::string& axis, std::int64_t flat) {
  const AxisView view = AxisView::of(shape, axis);
  return (flat / view.inner) % view.extent;
}

std::vector<Slice> slices_of(const Observed& o) {
  return shard_slices(o.entry.global.extent(placement_1d(o.entry).axis),
                      static_cast<int>(o.ranks.size()), placement_1d(o.entry).split);
}

}  // namespace

Finding rank_offset_gap(const Observed& o) {
  Finding f{.signature = "rank_offset_gap", .cause = Cause::position_offset};
  if (!placement_1d(o.entry).is_shard() || o.dense.empty()) {
    f.evidence = "n/a: not a sharded tensor";
    return f;
  }
  const std::vector<Slice> slices = slices_of(o);
  for (const Slice& slice : slices) {
    // A zigzag share has a run away from its start on every rank, the one at offset 0 too: a
    // position counted from the shard's start would move that rank as well, so the pattern this
    // signature looks for (that rank exact, the others not) says nothing about positions there.
    if (slice_runs(slice).size() > 1) {
      f.evidence = "n/a: the shares are two runs each (zigzag): no rank holds only offset 0";
      return f;
    }
  }
  std::map<int, double> gap;  // per rank: max |s - d|
  for (const Held& h : held_elements(o)) {
    const double d = o.dense[static_cast<std::size_t>(h.global)];
    gap[h.rank] = std::max(gap[h.rank], h.sharded == d ? 0.0 : std::fabs(h.sharded - d));
  }
  int origin_bad = 0, offset_ranks = 0, offset_bad = 0;
  std::vector<std::pair<std::int64_t, double>> by_offset;
  std::string example;
  for (const auto& [rank, g] : gap) {
    const Slice& slice = slices[static_cast<std::size_t>(rank)];
    if (slice.begin == 0) {
      origin_bad += g > 0 ? 1 : 0;
      continue;
    }
    ++offset_ranks;
    offset_bad += g > 0 ? 1 : 0;
    by_offset.emplace_back(slice.begin, g);
    if (g > 0 && example.empty()) {
      example = "rank " + std::to_string(rank) + " at " + placement_1d(o.entry).axis + "=" +
                std::to_string(slice.begin) + ": " + num(g);
    }
  }
  if (origin_bad > 0 || offset_ranks == 0 || offset_bad < offset_ranks) {
    f.evidence = "the gap does not follow the ranks' offsets (rank at offset 0: " +
                 std::string(origin_bad ? "differs" : "exact") + "; " + std::to_string(offset_bad) +
                 " of " + std::to_string(offset_ranks) + " ranks at a nonzero offset differ)";
    return f;
  }
  std::sort(by_offset.begin(), by_offset.end());
  bool growing = by_offset.size() >= 3;
  for (std::size_t i = 1; i < by_offset.size(); ++i) {
    growing = growing && by_offset[i].second > by_offset[i - 1].second;
  }
  f.confidence = offset_ranks >= 2 ? 0.7 : 0.5;
  f.evidence = "gap 0 on the rank at offset 0 and nonzero on all " + std::to_string(offset_ranks) +
               " ranks at a nonzero offset (" + example + ")" +
               (growing ? ", growing with the offset" : "") +
               ": positions counted from each shard's start";
  return f;
}

Finding shard_edge_gap(const Observed& o) {
  Finding f{.signature = "shard_edge_gap", .cause = Cause::position_offset};
  if (!placement_1d(o.entry).is_shard() || o.dense.empty()) {
    f.evidence = "n/a: not a sharded tensor";
    return f;
  }
  const std::string& axis = placement_1d(o.entry).axis;
  const std::int64_t extent = o.entry.global.extent(axis);
  std::set<std::int64_t> edges;  // positions next to an edge between two non-empty shards
  for (const Slice& slice : slices_of(o)) {
    for (const SliceRun& run : slice_runs(slice)) {  // a zigzag share has two runs
      if (run.begin == 0) continue;
      edges.insert(run.begin - 1);
      edges.insert(run.begin);
    }
  }
  std::set<std::int64_t> bad;
  for (const Held& h : held_elements(o)) {
    if (h.sharded != o.dense[static_cast<std::size_t>(h.global)]) {
      bad.insert(position_of(o.entry.global, axis, h.global));
    }
  }
  const bool confined =
      !bad.empty() && std::includes(edges.begin(), edges.end(), bad.begin(), bad.end());
  const bool interior_exact = static_cast<std::int64_t>(bad.size()) < extent &&
                              static_cast<std::int64_t>(edges.size()) < extent;
  if (!confined || !interior_exact) {
    f.evidence = std::to_string(bad.size()) + " of " + std::to_string(extent) + " " + axis +
                 " positions differ, not confined to the shard edges";
    return f;
  }
  std::string list;
  for (std::int64_t p : bad) list += (list.empty() ? "" : ",") + std::to_string(p);
  f.confidence = 0.6;
  f.evidence = "the gap is confined to " + axis + " positions " + list +
               ", next to edges between shards; every interior position matches";
  return f;
}

Finding shifted_copy(const Observed& o, double unit) {
  Finding f{.signature = "shifted_copy", .cause = Cause::position_offset};
  if (o.dense.empty()) {
    f.evidence = "n/a: no oracle values";
    return f;
  }
  const std::vector<Held> held = held_elements(o);
  std::vector<std::string> axes;
  if (placement_1d(o.entry).is_shard()) {
    axes.push_back(placement_1d(o.entry).axis);
  } else {
    for (const Axis& axis : o.entry.global.axes()) axes.push_back(axis.name);
  }
  double scale = 0;
  for (double d : o.dense) scale = std::max(scale, std::fabs(d));
  const double tolerance = kFitUlps * unit * scale;
  for (const std::string& axis : axes) {
    const AxisView view = AxisView::of(o.entry.global, axis);
    // One shift per rank; every differing element of the rank must fit it.
    std::map<int, std::int64_t> shift_of;
    bool all = true;
    std::size_t matched = 0;
    for (const Held& h : held) {
      const double d = o.dense[static_cast<std::size_t>(h.global)];
      if (h.sharded == d) continue;
      const std::int64_t pos = (h.global / view.inner) % view.extent;
      auto at = [&](std::int64_t s) { return h.global + s * view.inner; };
      auto fits = [&](std::int64_t s) {
        const std::int64_t p = pos + s;
        if (s == 0 || p < 0 || p >= view.extent) return false;
        const double other = o.dense[static_cast<std::size_t>(at(s))];
        return std::fabs(h.sharded - other) <= tolerance && std::fabs(other - d) > tolerance;
      };
      auto known = shift_of.find(h.rank);
      if (known != shift_of.end()) {
        all = all && fits(known->second);
      } else {
        std::int64_t found = 0;
        for (std::int64_t s = 1 - view.extent; s < view.extent && !found; ++s) {
          if (fits(s)) found = s;
        }
        all = all && found != 0;
        shift_of[h.rank] = found;
      }
      if (!all) break;
      ++matched;
    }
    if (!all || matched == 0) continue;
    std::string shifts;
    for (const auto& [rank, s] : shift_of) {
      shifts += (shifts.empty() ? "rank " : ", rank ") + std::to_string(rank) + ": " +
                (s > 0 ? "+" : "") + std::to_string(s);
    }
    f.confidence = matched >= 4 ? 0.75 : 0.5;
    f.evidence = "the " + std::to_string(matched) +
                 " differing sharded values equal the dense values at " + axis +
                 " positions shifted by one offset per rank (" + shifts + ")";
    return f;
  }
  f.evidence = "the differing values are not the dense values at shifted positions";
  return f;
}

}  // namespace shardsim
