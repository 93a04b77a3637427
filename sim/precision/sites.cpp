// The elements the comparator visits at a boundary (precision_diff.hpp, detail::compare_sites),
// reconstructed from the trace entry so that the precision diff can recompute an mp level's gap
// exactly from captured values. Mirrors Comparator::for_each_element (compare-inl.hpp): every
// rank at coordinate 0 of each Partial dim stands for a value, the sum in rank order of the
// addends of the ranks that share its coordinates on the other dims; padding is skipped.
#include "core/dist_tensor.hpp"
#include "precision/precision_diff.hpp"

namespace shardsim::detail {

std::vector<CompareSite> compare_sites(const TraceEntry& entry) {
  const Mesh& mesh = *entry.mesh;
  const Layout& layout = entry.layout;
  const int ranks = static_cast<int>(entry.ranks.size());
  auto represents = [&](int r) {
    for (int d = 0; d < layout.ndim(); ++d) {
      if (layout.on(d).is_partial() && mesh.coord(r, d) != 0) return false;
    }
    return true;
  };
  auto members = [&](int r) {
    std::vector<int> out;
    for (int m = 0; m < ranks; ++m) {
      bool same = true;
      for (int d = 0; d < layout.ndim() && same; ++d) {
        if (!layout.on(d).is_partial()) same = mesh.coord(m, d) == mesh.coord(r, d);
      }
      if (same) out.push_back(m);
    }
    return out;
  };
  std::vector<CompareSite> sites;
  for (int r = 0; r < ranks; ++r) {
    if (!represents(r)) continue;
    const std::vector<int> group = members(r);
    std::vector<Slice> box;
    for (const Axis& axis : entry.global.axes()) {
      box.push_back(axis_slice(entry.global, layout, mesh, r, axis.name));
    }
    for_each_valid(entry.ranks[static_cast<std::size_t>(r)].local_shape, box, entry.global,
                   [&](std::int64_t local_flat, std::int64_t global_flat) {
                     CompareSite site{global_flat, {}};
                     for (int m : group) site.addends.emplace_back(m, local_flat);
                     sites.push_back(std::move(site));
                   });
  }
  return sites;
}

}  // namespace shardsim::detail
