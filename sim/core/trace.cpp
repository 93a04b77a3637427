#include "core/trace.hpp"

#include <sstream>

namespace shardsim {

std::string_view boundary_kind_name(BoundaryKind kind) {
  switch (kind) {
    case BoundaryKind::input: return "input";
    case BoundaryKind::op: return "op";
    case BoundaryKind::collective: return "collective";
    case BoundaryKind::update: return "update";
    case BoundaryKind::check: return "check";
  }
  return "?";
}

std::string grad_name(std::string_view tensor) { return "grad(" + std::string(tensor) + ")"; }

bool is_grad_name(std::string_view name) { return name.starts_with("grad("); }

std::string part_name(std::string_view owner, std::string_view part) {
  return std::string(owner) + "." + std::string(part);
}

std::string moved_name(std::string_view tensor, std::string_view destination) {
  return std::string(tensor) + "@" + std::string(destination);
}

bool derived_from(std::string_view key, std::string_view name) {
  if (!key.starts_with(name)) return false;
  return key.size() == name.size() || key[name.size()] == '.' || key[name.size()] == '@';
}

std::vector<RankExtent> rank_extents(const Shape& global, const Layout& layout, const Mesh& mesh) {
  std::vector<RankExtent> out;
  for (int r = 0; r < mesh.size(); ++r) {
    RankExtent extent{r, mesh.coords(r), local_shape(global, layout, mesh, r), {}, ""};
    for (const Axis& axis : global.axes()) {
      if (!layout.shards(axis.name)) continue;
      const Slice slice = axis_slice(global, layout, mesh, r, axis.name);
      extent.offset[axis.name] = slice.begin;
      extent.slice += (extent.slice.empty() ? "" : " ") + slice_str(axis.name, slice);
    }
    if (layout.has_partial()) extent.slice += extent.slice.empty() ? "full (addend)" : " (addend)";
    if (extent.slice.empty()) extent.slice = "full";
    out.push_back(std::move(extent));
  }
  return out;
}

std::string where_label(int step, int micro, int micro_count, int chunk) {
  return "step " + std::to_string(step) +
         (micro_count > 0 && micro > 0
              ? " micro " + std::to_string(micro) + "/" + std::to_string(micro_count)
              : "") +
         " chunk " + std::to_string(chunk);
}

std::string format_entry(const TraceEntry& entry) {
  std::ostringstream out;
  out << "#" << entry.id << " "
      << where_label(entry.step, entry.micro, entry.micro_count, entry.chunk) << "  " << entry.op
      << " -> " << entry.tensor << " " << entry.global.str() << " " << entry.layout.str();
  if (entry.exact) out << "  (exact)";
  out << "\n";
  for (const RankExtent& rank : entry.ranks) {
    out << "    rank " << rank.rank;
    if (entry.mesh && entry.mesh->ndim() > 1)
      out << " (" << entry.mesh->coords_str(rank.rank) << ")";
    out << ": local " << rank.local_shape.str() << " " << rank.slice << "\n";
  }
  for (const std::string& note : entry.notes) out << "    note: " << note << "\n";
  return out.str();
}

}  // namespace shardsim
