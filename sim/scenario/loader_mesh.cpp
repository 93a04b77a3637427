// Reads a scenario's [mesh] (its dims) and each tensor's starting layout over it.
#include <algorithm>

#include "scenario/loader.hpp"

namespace shardsim {

// [mesh]: `ranks = N` (a 1-D mesh, dim "world") or `dims = { dp = 2, tp = 2 }` (named dims in
// the order written, outermost first), at most 4096 ranks in all.
MeshSpec Loader::mesh(const toml::table& t) const {
  check_keys(t, "mesh", {"ranks", "dims", "reduce_order", "schedule"});
  MeshSpec mesh;
  const toml::node* ranks = t.get("ranks");
  const toml::node* dims = t.get("dims");
  if (ranks && dims) fail(*dims, "mesh.dims", "give either ranks or dims, not both");
  if (!ranks && !dims) fail(t, "mesh", "missing required key 'ranks' (or 'dims')");
  if (ranks) {
    const std::int64_t n = integer(*ranks, "mesh.ranks");
    if (n < 1 || n > 4096) {
      fail(*ranks, "mesh.ranks", "ranks must be in [1, 4096], got " + std::to_string(n));
    }
    mesh.devices = Mesh(static_cast<int>(n));
  } else {
    mesh.devices = mesh_dims(*dims);
  }
  if (const toml::node* order = t.get("reduce_order")) {
    mesh.reduce_order = wrap(*order, "mesh.reduce_order", [&] {
      return parse_reduce_order(string(*order, "mesh.reduce_order"));
    });
  }
  if (const toml::node* schedule = t.get("schedule")) {
    mesh.schedule = wrap(*schedule, "mesh.schedule",
                         [&] { return parse_schedule(string(*schedule, "mesh.schedule")); });
  }
  return mesh;
}

Mesh Loader::mesh_dims(const toml::node& node) const {
  const toml::table& t = table(node, "mesh.dims");
  // toml++ keeps a table's keys sorted; the order written is the order of their positions.
  std::vector<std::pair<const toml::key*, const toml::node*>> entries;
  for (auto&& [key, value] : t) entries.emplace_back(&key, &value);
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    const auto& pa = a.first->source().begin;
    const auto& pb = b.first->source().begin;
    return pa.line != pb.line ? pa.line < pb.line : pa.column < pb.column;
  });
  if (entries.empty()) fail(node, "mesh.dims", "needs at least one dim, e.g. { dp = 2, tp = 2 }");
  std::vector<MeshDim> dims;
  std::int64_t total = 1;
  for (const auto& [key, value] : entries) {
    const std::string name(key->str());
    const std::string path = "mesh.dims." + name;
    if (!is_axis_name(name)) fail(*value, path, "a mesh dim name has letters, digits and _ only");
    const std::int64_t size = integer(*value, path);
    if (size < 1 || size > 4096) {
      fail(*value, path, "a mesh dim's size must be in [1, 4096], got " + std::to_string(size));
    }
    total *= size;
    if (total > 4096) fail(*value, path, "the mesh has more than 4096 ranks");
    dims.push_back({name, static_cast<int>(size)});
  }
  return Mesh(std::move(dims));
}

// A tensor's starting layout: on a 1-D mesh one placement string; on any mesh a list with one
// placement per dim, or a table keyed by dim name (dims not named are Replicate).
Layout Loader::layout(const toml::node& node, const std::string& path, const Mesh& mesh,
                      const Shape& shape) const {
  std::vector<Placement> dims(static_cast<std::size_t>(mesh.ndim()), Placement::replicate());
  auto parse_one = [&](const toml::node& item, const std::string& item_path) {
    Placement p = wrap(item, item_path, [&] { return parse_placement(string(item, item_path)); });
    if (p.is_shard() && !shape.has(p.axis)) {
      fail(item, item_path,
           "unknown axis '" + p.axis + "' in placement " + p.str() + ": the tensor has axes " +
               shape.str());
    }
    return p;
  };
  if (node.is_string()) {
    if (mesh.ndim() != 1) {
      fail(node, path,
           "the mesh has " + std::to_string(mesh.ndim()) + " dims (" + mesh.str() +
               "): give one placement per dim, e.g. [\"Replicate\", \"Shard(seq)\"] or "
               "{ tp = \"Shard(seq)\" }");
    }
    dims[0] = parse_one(node, path);
  } else if (node.is_array()) {
    const toml::array& list = *node.as_array();
    if (static_cast<int>(list.size()) != mesh.ndim()) {
      fail(node, path,
           "needs one placement per mesh dim (" + mesh.str() + "), got " +
               std::to_string(list.size()));
    }
    for (std::size_t d = 0; d < list.size(); ++d) {
      dims[d] = parse_one(*list.get(d), path + "[" + std::to_string(d) + "]");
    }
  } else if (node.is_table()) {
    for (auto&& [key, value] : *node.as_table()) {
      const std::string name(key.str());
      const int d = mesh.find_dim(name);
      if (d < 0) {
        std::vector<std::string> names;
        for (const MeshDim& dim : mesh.dims()) names.push_back(dim.name);
        const std::string hint = nearest(name, names);
        fail(value, path + "." + name,
             "unknown mesh dim '" + name + "' (the mesh is " + mesh.str() + ")" +
                 (hint.empty() ? "" : "; did you mean '" + hint + "'?"));
      }
      dims[static_cast<std::size_t>(d)] = parse_one(value, path + "." + name);
    }
  } else {
    fail(node, path, "expected a placement string, a list or a table, got " + type_name(node));
  }
  Layout out(std::move(dims));
  if (const std::string problem = out.problem(mesh); !problem.empty()) fail(node, path, problem);
  return out;
}

}  // namespace shardsim
