// The heatmap data of shardsim precision: |sharded - dense| per global element of one boundary at
// one level, laid out as (row, column) with the rank-shard edges.
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "core/dist_tensor.hpp"
#include "core/error.hpp"
#include "precision/precision_diff.hpp"

namespace shardsim {

namespace {

// |s - d| for two IEEE values of one type (inf when either is NaN or they are different infs).
template <typename F>
Magnitude ieee_gap(F s, F d) {
  if (std::isnan(s) || std::isnan(d)) return Magnitude::infinity();
  if (std::isinf(s) || std::isinf(d)) return s == d ? Magnitude() : Magnitude::infinity();
  return Magnitude::of(static_cast<double>(s) - static_cast<double>(d));
}

// The gap of one global element given the contributions (rank, local flat) the placement maps to
// it: a Partial sum is formed in rank order in the level's type (as the comparator does); a
// Replicate element counts its worst rank.
Magnitude element_gap(const Precision& level, unsigned bits, const CapturedBoundary& c, bool partial,
                   const std::vector<std::pair<int, std::int64_t>>& from, std::int64_t global) {
  if (partial) {
    switch (level.kind) {
      case ScalarKind::bf16:  // a narrow level's values are floats (storage.hpp)
      case ScalarKind::f16:
      case ScalarKind::f32: {
        float sum = 0;
        for (std::size_t k = 0; k < from.size(); ++k) {
          const float v = c.ranks[from[k].first].f32[static_cast<std::size_t>(from[k].second)];
          sum = k == 0 ? v : sum + v;
        }
        return ieee_gap(sum, c.dense.f32[static_cast<std::size_t>(global)]);
      }
      case ScalarKind::f64: {
        double sum = 0;
        for (std::size_t k = 0; k < from.size(); ++k) {
          const double v = c.ranks[from[k].first].f64[static_cast<std::size_t>(from[k].second)];
          sum = k == 0 ? v : sum + v;
        }
        return ieee_gap(sum, c.dense.f64[static_cast<std::size_t>(global)]);
      }
      case ScalarKind::mp:
      case ScalarKind::dd:  // the sum at the level's bits in MPFR: close to, not exactly, dd/qd's
      case ScalarKind::qd: {
        std::vector<const std::string*> addends;
        for (const auto& [rank, local] : from) addends.push_back(&c.ranks[rank].exact[static_cast<std::size_t>(local)]);
        return detail::mp_abs_gap(addends, c.dense.exact[static_cast<std::size_t>(global)], bits);
      }
    }
  }
  Magnitude worst;
  for (const auto& [rank, local] : from) {
    const std::size_t l = static_cast<std::size_t>(local);
    const std::size_t g = static_cast<std::size_t>(global);
    Magnitude gap;
    switch (level.kind) {
      case ScalarKind::bf16:
      case ScalarKind::f16:
      case ScalarKind::f32: gap = ieee_gap(c.ranks[rank].f32[l], c.dense.f32[g]); break;
      case ScalarKind::f64: gap = ieee_gap(c.ranks[rank].f64[l], c.dense.f64[g]); break;
      case ScalarKind::mp:
      case ScalarKind::dd:
      case ScalarKind::qd: gap = detail::mp_abs_gap({&c.ranks[rank].exact[l]}, c.dense.exact[g], bits); break;
    }
    worst = max(worst, gap);
  }
  return worst;
}

// Which (rank, local flat) positions hold each global element of the boundary. With a Partial
// dim, only the members at coordinate 0 of every Replicate dim: each addend once.
std::vector<std::vector<std::pair<int, std::int64_t>>> holders(const TraceEntry& entry) {
  const Shape& global = entry.global;
  const Mesh& mesh = *entry.mesh;
  const int ranks = static_cast<int>(entry.ranks.size());
  std::vector<std::vector<std::pair<int, std::int64_t>>> from(
      static_cast<std::size_t>(global.numel()));
  for (int r = 0; r < ranks; ++r) {
    bool counted = true;
    for (int d = 0; d < entry.layout.ndim() && entry.layout.has_partial(); ++d) {
      if (entry.layout.on(d).is_replicate() && mesh.coord(r, d) != 0) counted = false;
    }
    if (!counted) continue;
    std::vector<Slice> box;
    for (const Axis& axis : global.axes()) {
      box.push_back(axis_slice(global, entry.layout, mesh, r, axis.name));
    }
    for_each_valid(entry.ranks[static_cast<std::size_t>(r)].local_shape, box, global,
                   [&](std::int64_t local_flat, std::int64_t global_flat) {
                     from[static_cast<std::size_t>(global_flat)].emplace_back(r, local_flat);
                   });
  }
  return from;
}

// Shard edges (where a rank's piece of a sharded axis starts: column edges on the column axis,
// row edges on the others) and the row labels ("batch=0 seq=12").
void add_edges_and_labels(Heatmap& map, const TraceEntry& entry, std::size_t column) {
  const Shape& global = entry.global;
  const int ranks = static_cast<int>(entry.ranks.size());
  std::map<std::string, std::set<std::int64_t>> begins;
  for (const Axis& axis : global.axes()) {
    if (!entry.layout.shards(axis.name)) continue;
    for (int r = 0; r < ranks; ++r) {
      const Slice s = axis_slice(global, entry.layout, *entry.mesh, r, axis.name);
      for (const SliceRun& run : slice_runs(s)) {  // a zigzag share starts twice
        if (run.begin > 0 && run.begin < axis.extent) begins[axis.name].insert(run.begin);
      }
    }
  }
  if (global.rank() > 0 && begins.count(global[column].name)) {
    const std::set<std::int64_t>& edges = begins.at(global[column].name);
    map.column_edges.assign(edges.begin(), edges.end());
  }
  for (std::int64_t row = 0; row < map.rows; ++row) {
    std::int64_t rest = row;
    std::vector<std::pair<std::string, std::int64_t>> index;
    for (std::size_t a = global.rank(); a-- > 0;) {
      if (a == column) continue;
      index.emplace(index.begin(), global[a].name, rest % global[a].extent);
      rest /= global[a].extent;
    }
    std::string label;
    bool edge = false;
    for (const auto& [name, i] : index) {
      label += (label.empty() ? "" : " ") + name + "=" + std::to_string(i);
      if (begins.count(name) && begins.at(name).count(i)) edge = true;
    }
    if (edge) map.row_edges.push_back(row);
    map.row_labels.push_back(label);
  }
}

}  // namespace

Heatmap make_heatmap(const PrecisionDiff& diff, std::size_t level, std::size_t boundary) {
  const BoundaryResult& result = diff.runs[level].boundaries[boundary];
  const TraceEntry& entry = result.entry;
  const CapturedBoundary& captured = *result.captured;
  const Shape& global = entry.global;

  Heatmap map;
  map.boundary = entry.id;
  map.tensor = entry.tensor;
  map.level = diff.levels[level].name();
  map.placement = entry.layout.str();
  std::size_t column = global.rank() == 0 ? 0 : global.rank() - 1;
  if (auto hidden = global.find("hidden")) column = *hidden;
  map.column_axis = global.rank() == 0 ? "(scalar)" : global[column].name;
  map.columns = global.rank() == 0 ? 1 : global[column].extent;
  map.rows = map.columns == 0 ? 0 : global.numel() / map.columns;
  for (std::size_t a = 0; a < global.rank(); ++a) {
    if (a == column) continue;
    map.row_axes += (map.row_axes.empty() ? "" : " x ") + global[a].name;
  }
  if (map.row_axes.empty()) map.row_axes = "(none)";

  // The element at (row, col) is the global element whose index on the column axis is col and
  // whose other indices, in order, flatten to row.
  const auto from = holders(entry);
  map.values.assign(static_cast<std::size_t>(global.numel()), Magnitude::nan());
  for (std::int64_t g = 0; g < global.numel(); ++g) {
    const std::vector<std::int64_t> index = unflatten(global, g);
    std::int64_t row = 0;
    for (std::size_t a = 0; a < global.rank(); ++a) {
      if (a != column) row = row * global[a].extent + index[a];
    }
    const std::int64_t col = global.rank() == 0 ? 0 : index[column];
    if (!captured.has_dense || from[static_cast<std::size_t>(g)].empty()) continue;
    map.values[static_cast<std::size_t>(row * map.columns + col)] =
        element_gap(diff.levels[level], diff.significand_bits[level], captured,
                    entry.layout.has_partial(), from[static_cast<std::size_t>(g)], g);
  }
  add_edges_and_labels(map, entry, column);
  return map;
}

}  // namespace shardsim
