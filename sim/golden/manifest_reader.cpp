// Reading a golden manifest back: every key typed and located, the digest checked, and each
// tensor's metadata (global shape, placement, offsets, slices, ranks) rebuilt from its placement
// and compared, so an edited manifest is refused (exit 2) instead of misleading `compare`.
#include <set>
#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "io/safetensors_format.hpp"
#include "core/mesh.hpp"
#include "core/scalar.hpp"
#include "golden/manifest.hpp"

namespace shardsim::golden_detail {

namespace {

// Typed access to the manifest with located errors ("DIR/manifest.json: tensors[3].shape: ...").
class ManifestReader {
 public:
  explicit ManifestReader(std::string what) : what_(std::move(what)) {}

  [[noreturn]] void fail(const std::string& path, const std::string& message) const {
    throw InputError(what_ + ": " + path + ": " + message);
  }
  const Json& member(const Json& object, const std::string& path, const std::string& key) const {
    if (!object.is_object()) fail(path, "expected an object");
    auto found = object.find(key);
    if (found == object.end()) fail(path, "missing key '" + key + "'");
    return *found;
  }
  std::string string(const Json& object, const std::string& path, const std::string& key) const {
    const Json& v = member(object, path, key);
    if (!v.is_string()) fail(path + "." + key, "expected a string, got " + clipped(v.dump()));
    return v.get<std::string>();
  }
  std::int64_t integer(const Json& v, const std::string& path) const {
    if (!v.is_number_integer()) fail(path, "expected an integer, got " + clipped(v.dump()));
    if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)) {
      fail(path, "integer too large");
    }
    return v.get<std::int64_t>();
  }
  std::int64_t integer(const Json& object, const std::string& path, const std::string& key) const {
    return integer(member(object, path, key), path + "." + key);
  }

 private:
  std::string what_;
};

// The manifest's JSON: nested at most 32 levels, no key twice in an object (the parser would
// keep the last one silently).
Json parse_json(const std::string& text, const std::string& what) {
  std::vector<std::set<std::string>> open_objects;
  auto depth_limit = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (depth > 32) throw InputError(what + ": invalid JSON: nested deeper than 32 levels");
    if (event == Json::parse_event_t::object_start) open_objects.emplace_back();
    if (event == Json::parse_event_t::object_end && !open_objects.empty()) open_objects.pop_back();
    if (event == Json::parse_event_t::key && !open_objects.empty() &&
        !open_objects.back().insert(parsed.get<std::string>()).second) {
      throw InputError(what + ": invalid JSON: duplicate key " + quote(parsed.get<std::string>()));
    }
    return true;
  };
  // The JSON parser takes a NUL byte for the end of its input; JSON text has none.
  if (const std::size_t nul = text.find('\0'); nul != std::string::npos) {
    throw InputError(what + ": invalid JSON: a NUL byte at offset " + std::to_string(nul));
  }
  try {
    return Json::parse(text, depth_limit);
  } catch (const Json::exception& e) {
    throw InputError(what + ": invalid JSON: " + e.what());
  }
}

// shape, axes, global_shape: typed, non-negative, at most 64 axes.
// Extents a golden tensor can have: the element count of a shape stays below 2^62, so that the
// shard arithmetic on it (torch.chunk sizes, offsets) cannot overflow.
void check_extents(const ManifestReader& m, const std::string& path,
                   const std::vector<std::int64_t>& extents) {
  long double count = 1;
  for (std::int64_t extent : extents) count *= static_cast<long double>(extent);
  if (count >= 0x1p62L) m.fail(path, "more than 2^62 elements");
}

void parse_shapes(const ManifestReader& m, const Json& item, const std::string& path,
                  GoldenInfo& info) {
  const Json& shape = m.member(item, path, "shape");
  const Json& axes = m.member(item, path, "axes");
  if (!shape.is_array() || !axes.is_array() || shape.size() != axes.size() || shape.size() > 64) {
    m.fail(path + ".shape", "shape and axes must be arrays of the same length");
  }
  for (std::size_t a = 0; a < shape.size(); ++a) {
    const std::int64_t extent = m.integer(shape[a], path + ".shape[" + std::to_string(a) + "]");
    if (extent < 0) m.fail(path + ".shape", "negative extent");
    info.shape.push_back(extent);
    if (!axes[a].is_string()) m.fail(path + ".axes", "axis names must be strings");
    info.axes.push_back(axes[a].get<std::string>());
  }
  check_extents(m, path + ".shape", info.shape);
  const Json& global = m.member(item, path, "global_shape");
  if (!global.is_object() || global.size() > 64)
    m.fail(path + ".global_shape", "expected an object");
  std::vector<Axis> global_axes;
  for (const auto& [axis, extent] : global.items()) {
    global_axes.push_back({axis, m.integer(extent, path + ".global_shape." + clipped(axis))});
    if (global_axes.back().extent < 0) m.fail(path + ".global_shape", "negative extent");
  }
  std::vector<std::int64_t> global_extents;
  for (const Axis& axis : global_axes) global_extents.push_back(axis.extent);
  check_extents(m, path + ".global_shape", global_extents);
  info.global_shape = Shape(std::move(global_axes));
}

// The metadata must be what the writer derives from the global shape, the placement and the
// rank: the same axes, the local shape, offset, slice label and every rank's extent.
void check_metadata(const ManifestReader& m, const Json& item, const std::string& path,
                    const GoldenInfo& info) {
  Layout layout;
  try {
    layout = parse_layout(info.placement, info.mesh->ndim());
  } catch (const InputError& e) {
    m.fail(path + ".placement", e.what());
  }
  const Mesh& mesh = *info.mesh;
  // Well formed on the mesh (a zigzag dim does not share its axis with another), as the loader
  // requires of a scenario: the slice arithmetic below assumes it.
  if (const std::string problem = layout.problem(mesh); !problem.empty()) {
    m.fail(path + ".placement", problem);
  }
  std::vector<std::string> global_axes;
  for (const Axis& axis : info.global_shape.axes()) global_axes.push_back(axis.name);
  if (global_axes != info.axes) {
    m.fail(path + ".global_shape",
           "its axes " + info.global_shape.str() + " are not the tensor's axes, in order");
  }
  for (const Placement& placement : layout.dims) {
    if (placement.is_shard() && !info.global_shape.has(placement.axis)) {
      m.fail(path + ".placement", layout.str() + " shards an axis global_shape does not have");
    }
  }
  const bool shard = info.rank >= 0;
  if (m.string(item, path, "role") != (shard ? "shard" : "global")) {
    m.fail(path + ".role", shard ? "a tensor with a rank must be a \"shard\""
                                 : "a tensor without a rank must be \"global\"");
  }
  const Shape expected =
      shard ? local_shape(info.global_shape, layout, mesh, info.rank) : info.global_shape;
  std::vector<std::int64_t> extents;
  for (const Axis& axis : expected.axes()) extents.push_back(axis.extent);
  if (extents != info.shape) {
    m.fail(path + ".shape", "does not match " + expected.str() + ", which global_shape and " +
                                layout.str() + " give " +
                                (shard ? "this rank" : "the global value"));
  }
  const Json offset =
      shard ? offset_json(info.global_shape, layout, mesh, info.rank) : Json::object();
  if (m.member(item, path, "offset") != offset) {
    m.fail(path + ".offset", "expected " + offset.dump() + " for " + layout.str());
  }
  const Json runs = shard ? runs_json(info.global_shape, layout, mesh, info.rank) : Json::object();
  if ((item.contains("runs") ? item["runs"] : Json::object()) != runs) {
    m.fail(path + ".runs", runs.empty() ? "unexpected: " + layout.str() + " gives this tensor one "
                                                               "run per sharded axis"
                                        : "expected " + runs.dump() + " for " + layout.str());
  }
  if (shard && info.slice != slice_label(info.global_shape, layout, mesh, info.rank)) {
    m.fail(path + ".slice",
           "expected " + quote(slice_label(info.global_shape, layout, mesh, info.rank)));
  }
  if (m.member(item, path, "ranks") != ranks_json(info.global_shape, layout, mesh)) {
    m.fail(path + ".ranks", "does not match the extents " + layout.str() + " gives each of the " +
                                std::to_string(info.ranks) + " ranks");
  }
}

// "#ID step S chunk C OP -> TENSOR", from a tensor's "boundary": every key the writer writes,
// typed (id >= 0, step and chunk >= 1, a known kind).
std::string boundary_text(const ManifestReader& m, const Json& boundary, const std::string& path) {
  const std::int64_t id = m.integer(boundary, path, "id");
  const std::int64_t step = m.integer(boundary, path, "step");
  const std::int64_t chunk = m.integer(boundary, path, "chunk");
  if (id < 0) m.fail(path + ".id", "negative");
  if (step < 1) m.fail(path + ".step", "steps count from 1");
  if (chunk < 1) m.fail(path + ".chunk", "chunks count from 1");
  // Micro-batches count from 1; 0 is a step-level boundary of a micro-batched run.
  if (boundary.contains("micro") && m.integer(boundary, path, "micro") < 0) {
    m.fail(path + ".micro", "negative");
  }
  const std::string kind = m.string(boundary, path, "kind");
  bool known = false;
  for (BoundaryKind k : {BoundaryKind::input, BoundaryKind::op, BoundaryKind::collective,
                         BoundaryKind::update, BoundaryKind::check}) {
    known = known || kind == boundary_kind_name(k);
  }
  if (!known) m.fail(path + ".kind", "unknown boundary kind " + quote(kind));
  m.string(boundary, path, "dense");
  if (!m.member(boundary, path, "exact_claimed").is_boolean()) {
    m.fail(path + ".exact_claimed", "expected true or false");
  }
  return "#" + std::to_string(id) + " step " + std::to_string(step) + " chunk " +
         std::to_string(chunk) + " " + m.string(boundary, path, "op") + " -> " +
         m.string(boundary, path, "tensor");
}

// "near_midpoint" (dd/qd references): a count of at least 1 and the first such element's index.
void check_near_midpoint(const ManifestReader& m, const Json& item, const std::string& path,
                         const GoldenInfo& info) {
  if (!item.contains("near_midpoint")) return;
  const std::string where = path + ".near_midpoint";
  const Json& near = item["near_midpoint"];
  long double numel = 1;
  for (std::int64_t extent : info.shape) numel *= static_cast<long double>(extent);
  const std::int64_t count = m.integer(near, where, "count");
  const std::int64_t first = m.integer(near, where, "first_index");
  if (count < 1 || static_cast<long double>(count) > numel)
    m.fail(where + ".count", "out of range");
  if (first < 0 || static_cast<long double>(first) >= numel) {
    m.fail(where + ".first_index", "out of range");
  }
}

GoldenInfo parse_info(const ManifestReader& m, const Json& item, const std::string& path,
                      const std::shared_ptr<const Mesh>& mesh) {
  const int ranks = mesh->size();
  GoldenInfo info;
  info.name = m.string(item, path, "name");
  info.file = m.string(item, path, "file");
  if (info.file.empty() || info.file.find('/') != std::string::npos || info.file.front() == '.') {
    m.fail(path + ".file", quote(info.file) + " must be a plain file name inside the directory");
  }
  const std::string dtype = m.string(item, path, "dtype");
  const auto parsed = format::dtype_from_safetensors(dtype);
  if (!parsed) m.fail(path + ".dtype", "unknown dtype " + quote(dtype));
  info.dtype = *parsed;
  parse_shapes(m, item, path, info);
  const Json& rank = m.member(item, path, "rank");
  if (!rank.is_null()) {
    const std::int64_t r = m.integer(rank, path + ".rank");
    if (r < 0 || r >= ranks) m.fail(path + ".rank", "rank out of range");
    info.rank = static_cast<int>(r);
    info.slice = m.string(item, path, "slice");
  }
  const Json& offset = m.member(item, path, "offset");
  if (!offset.is_object()) m.fail(path + ".offset", "expected an object");
  for (const auto& [axis, begin] : offset.items()) {
    info.offset[axis] = m.integer(begin, path + ".offset." + clipped(axis));
  }
  info.placement = m.string(item, path, "placement");
  info.ranks = ranks;
  info.mesh = mesh;
  info.sha256 = m.string(item, path, "sha256");
  info.boundary = boundary_text(m, m.member(item, path, "boundary"), path + ".boundary");
  if (info.rank < 0 && item.contains("slice") && !item["slice"].is_null()) {
    m.fail(path + ".slice",
           "a global tensor has no slice (null), got " + clipped(item["slice"].dump()));
  }
  check_near_midpoint(m, item, path, info);
  check_metadata(m, item, path, info);
  info.layout = parse_layout(info.placement, mesh->ndim());
  return info;
}

// The manifest's mesh: "mesh" (N-D) must multiply to "ranks"; without it, a 1-D mesh of ranks.
Mesh parse_mesh(const ManifestReader& m, const Json& manifest, int ranks) {
  if (!manifest.contains("mesh")) return Mesh(ranks);
  const Json& dims = manifest["mesh"];
  if (!dims.is_array() || dims.empty()) m.fail("mesh", "expected a non-empty array of dims");
  std::vector<MeshDim> out;
  std::int64_t total = 1;
  for (std::size_t d = 0; d < dims.size(); ++d) {
    const std::string path = "mesh[" + std::to_string(d) + "]";
    const std::string name = m.string(dims[d], path, "name");
    if (!is_axis_name(name)) m.fail(path + ".name", "not a dim name: " + quote(name));
    for (const MeshDim& earlier : out) {
      if (earlier.name == name) m.fail(path + ".name", "duplicate dim name " + quote(name));
    }
    const std::int64_t size = m.integer(dims[d], path, "size");
    if (size < 1 || size > 4096) m.fail(path + ".size", "out of range");
    total *= size;
    if (total > 4096) m.fail("mesh", "more than 4096 ranks");
    out.push_back({name, static_cast<int>(size)});
  }
  if (total != ranks)
    m.fail("mesh", "its dims multiply to " + std::to_string(total) + ", not to ranks");
  return Mesh(std::move(out));
}

// The keys that describe the run and that compare only prints: typed, and names it knows.
void check_descriptive(const ManifestReader& m, const Json& manifest) {
  const std::int64_t bits = m.integer(manifest, "(root)", "significand_bits");
  if (bits < 2) m.fail("significand_bits", "out of range");
  const std::string reduce_order = m.string(manifest, "(root)", "reduce_order");
  const std::string schedule = m.string(manifest, "(root)", "schedule");
  try {
    parse_reduce_order(reduce_order);
  } catch (const InputError& e) {
    m.fail("reduce_order", e.what());
  }
  try {
    parse_schedule(schedule);
  } catch (const InputError& e) {
    m.fail("schedule", e.what());
  }
  const std::string verdict = m.string(manifest, "(root)", "verdict");
  if (verdict != "pass" && verdict != "fail") m.fail("verdict", "expected \"pass\" or \"fail\"");
  for (const char* key : {"faults", "dtypes"}) {
    const Json& list = m.member(manifest, "(root)", key);
    if (!list.is_array()) m.fail(key, "expected an array of names");
    for (const Json& name : list) {
      if (!name.is_string()) m.fail(key, "expected an array of names");
      const std::string text = name.get<std::string>();
      const bool dtypes = std::string_view(key) == "dtypes";
      if (dtypes && text != "f64" && text != "f32" && text != "bf16" && text != "f16") {
        m.fail(key, "unknown dtype " + quote(text));
      }
    }
  }
  if (!m.member(manifest, "(root)", "boundaries").is_array())
    m.fail("boundaries", "expected an array");
}

// The format, version and digest: anything else in the file is trusted only after these.
void check_header(const ManifestReader& m, const Json& manifest, const std::string& text) {
  if (!manifest.is_object() || m.string(manifest, "(root)", "format") != format::kManifestFormat) {
    m.fail("format", "not a shardsim golden manifest");
  }
  if (m.integer(manifest, "(root)", "format_version") != format::kManifestFormatVersion) {
    m.fail("format_version", "unsupported version (this shardsim reads version " +
                                 std::to_string(format::kManifestFormatVersion) +
                                 "; rewrite the goldens with this shardsim)");
  }
  const std::string digest = m.string(manifest, "(root)", std::string(kManifestDigestKey));
  if (digest.size() != 64 || digest.find_first_not_of("0123456789abcdef") != std::string::npos) {
    m.fail(std::string(kManifestDigestKey), "expected 64 lowercase hex digits");
  }
  if (manifest_digest(text, digest) != digest) {
    m.fail(std::string(kManifestDigestKey),
           "does not match the manifest's bytes: the manifest was edited or is corrupt");
  }
}

}  // namespace

GoldenDir parse_manifest(const std::string& text, const std::string& what) {
  const Json manifest = parse_json(text, what);
  const ManifestReader m(what);
  check_header(m, manifest, text);
  GoldenDir out;
  out.precision = m.string(manifest, "(root)", "precision");
  try {
    parse_precision(out.precision);
  } catch (const InputError& e) {
    m.fail("precision", e.what());
  }
  const std::int64_t ranks = m.integer(manifest, "(root)", "ranks");
  if (ranks < 1 || ranks > 4096) m.fail("ranks", "out of range");
  const auto mesh = std::make_shared<const Mesh>(parse_mesh(m, manifest, static_cast<int>(ranks)));
  out.storage = m.string(manifest, "(root)", "storage");
  if (out.storage != "safetensors" && out.storage != "npy")
    m.fail("storage", "expected safetensors or npy");
  const Json& tensors = m.member(manifest, "(root)", "tensors");
  if (!tensors.is_array()) m.fail("tensors", "expected an array");
  check_descriptive(m, manifest);
  const Json& scenario = m.member(manifest, "(root)", "scenario");
  const auto metadata = safetensors_metadata(
      m.string(manifest, "(root)", "shardsim_version"), m.string(scenario, "scenario", "name"),
      m.string(scenario, "scenario", "sha256"), out.precision,
      m.string(manifest, "(root)", "reduce_order"));
  out.safetensors_metadata = {metadata.begin(), metadata.end()};
  std::set<std::string> names;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const std::string path = "tensors[" + std::to_string(i) + "]";
    out.infos.push_back(parse_info(m, tensors[i], path, mesh));
    const std::string& file = out.infos.back().file;
    if (out.storage == "safetensors" ? file != format::kGoldenSafetensorsFile
                                     : !file.ends_with(".npy")) {
      m.fail(path + ".file", quote(file) + " is not a file of " + out.storage + " storage");
    }
    if (!names.insert(out.infos.back().name).second) {
      m.fail(path + ".name", "duplicate name " + quote(out.infos.back().name));
    }
  }
  parse_budgets(manifest, what, out);
  check_manifest_consistency(manifest, what);
  return out;
}

}  // namespace shardsim::golden_detail
