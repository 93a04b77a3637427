#include "shardsim/trace.hpp"

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

std::vector<RankExtent> rank_extents(const Shape& global, const Placement& placement, int ranks) {
  std::vector<RankExtent> out;
  for (int r = 0; r < ranks; ++r) {
    RankExtent extent{r, local_shape(global, placement, ranks, r), {}, "full"};
    if (placement.is_shard()) {
      const Slice slice = rank_slice(global, placement, ranks, r);
      extent.offset[placement.axis] = slice.begin;
      extent.slice = slice_str(placement.axis, slice);
    } else if (placement.is_partial()) {
      extent.slice = "full (addend)";
    }
    out.push_back(std::move(extent));
  }
  return out;
}

std::string format_entry(const TraceEntry& entry) {
  std::ostringstream out;
  out << "#" << entry.id << " step " << entry.step << " chunk " << entry.chunk << "  "
      << entry.op << " -> " << entry.tensor << " " << entry.global.str() << " "
      << entry.placement.str();
  if (entry.exact) out << "  (exact)";
  out << "\n";
  for (const RankExtent& rank : entry.ranks) {
    out << "    rank " << rank.rank << ": local " << rank.local_shape.str() << " " << rank.slice
        << "\n";
  }
  for (const std::string& note : entry.notes) out << "    note: " << note << "\n";
  return out.str();
}

}  // namespace shardsim
