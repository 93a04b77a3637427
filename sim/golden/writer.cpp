// Building and writing a golden set: names (golden.hpp), the manifest (README.md "Golden
// tensors"), the safetensors or npy files.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "shardsim/error.hpp"
#include "shardsim/golden/golden_set.hpp"
#include "shardsim/io.hpp"
#include "shardsim/report/report.hpp"
#include "shardsim/sha256.hpp"

namespace shardsim {

namespace {

using Json = nlohmann::ordered_json;

std::vector<std::int64_t> extents(const Shape& shape) {
  std::vector<std::int64_t> out;
  for (const Axis& axis : shape.axes()) out.push_back(axis.extent);
  return out;
}

std::vector<std::string> axis_names(const Shape& shape) {
  std::vector<std::string> out;
  for (const Axis& axis : shape.axes()) out.push_back(axis.name);
  return out;
}

Json shape_json(const Shape& shape) {
  Json out = Json::object();
  for (const Axis& axis : shape.axes()) out[axis.name] = axis.extent;
  return out;
}

// "seq=12:13", "seq=12:13+3pad", "replicate", "partial"; on an N-D mesh every sharded axis
// ("batch=0:2,seq=4:8"), then ",partial" when a dim holds addends.
std::string slice_label(const TraceEntry& entry, int rank) {
  std::string out;
  for (const Axis& axis : entry.global.axes()) {
    if (!entry.layout.shards(axis.name)) continue;
    const Slice slice = axis_slice(entry.global, entry.layout, *entry.mesh, rank, axis.name);
    out += (out.empty() ? "" : ",") + axis.name + "=" + std::to_string(slice.begin) + ":" +
           std::to_string(slice.end);
    if (slice.pad() > 0) out += "+" + std::to_string(slice.pad()) + "pad";
  }
  if (entry.layout.has_partial()) return out.empty() ? "partial" : out + ",partial";
  return out.empty() ? "replicate" : out;
}

// A shard's name: NAME@rankR[SLICE]; on an N-D mesh NAME@rankR(dp=1,tp=0)[SLICE].
std::string shard_name(const std::string& name, const TraceEntry& entry, int rank) {
  std::string coords;
  if (entry.mesh->ndim() > 1) {
    for (int d = 0; d < entry.mesh->ndim(); ++d) {
      coords += std::string(d ? "," : "(") + entry.mesh->dim(d).name + "=" +
                std::to_string(entry.mesh->coord(rank, d));
    }
    coords += ")";
  }
  return name + "@rank" + std::to_string(rank) + coords + "[" + slice_label(entry, rank) + "]";
}

// A dropout mask: the name says so and every value is 0 or 1.
bool is_mask(const TraceEntry& entry, const CapturedBoundary& captured) {
  if (!entry.tensor.ends_with(".mask")) return false;
  auto binary = [](const std::vector<double>& values) {
    return std::all_of(values.begin(), values.end(), [](double v) { return v == 0.0 || v == 1.0; });
  };
  if (captured.has_dense && !binary(captured.dense.f64)) return false;
  for (const CapturedValues& rank : captured.ranks) {
    if (!binary(rank.f64)) return false;
  }
  return true;
}

// The base name of every golden boundary: "inputs/T" or "sS/cC/T", with "#K" on all but the
// last of several boundaries that share a base.
std::vector<std::string> base_names(const RunReport& report, const std::vector<std::size_t>& kept) {
  std::vector<std::string> names;
  std::map<std::string, int> total;
  for (std::size_t i : kept) {
    const TraceEntry& e = report.boundaries[i].entry;
    names.push_back(e.kind == BoundaryKind::input ? "inputs/" + e.tensor
                                      : "s" + std::to_string(e.step) + "/c" +
                                            std::to_string(e.chunk) + "/" + e.tensor);
    ++total[names.back()];
  }
  std::map<std::string, int> seen;
  for (std::string& name : names) {
    const int k = ++seen[name];
    if (k < total[name]) name += "#" + std::to_string(k);
  }
  return names;
}

Json rank_json(const RankExtent& r) {
  Json offset = Json::object();
  for (const auto& [axis, begin] : r.offset) offset[axis] = begin;
  return Json{{"rank", r.rank}, {"local_shape", shape_json(r.local_shape)}, {"offset", offset},
              {"slice", r.slice}};
}

// The manifest's "scenario": name, SHA-256 and text, and "input_files" when some tensor is read
// from a file (init = { file, tensor }): which file, its SHA-256, so that a golden set names
// exactly what it was computed from.
Json scenario_json(const Scenario& scenario, const std::string& scenario_sha) {
  Json out{{"name", scenario.name}, {"sha256", scenario_sha}, {"text", scenario.text}};
  Json files = Json::array();
  for (const TensorSpec& spec : scenario.tensors) {
    if (spec.init.dist != InitDist::file) continue;
    files.push_back(Json{{"tensor", spec.name},
                         {"file", spec.init.file},
                         {"file_tensor", spec.init.file_tensor},
                         {"dtype", spec.init.file_dtype},
                         {"sha256", spec.init.file_sha256}});
  }
  if (!files.empty()) out["input_files"] = files;
  return out;
}

}  // namespace

GoldenSet build_goldens(const Scenario& scenario, const RunReport& reference,
                        const GoldenOptions& options) {
  // Boundaries that carry golden values: every captured one except replica checks (their
  // "oracle" is rank 0's own copy, not an oracle value).
  std::vector<std::size_t> kept;
  for (std::size_t i = 0; i < reference.boundaries.size(); ++i) {
    const BoundaryResult& b = reference.boundaries[i];
    SHARDSIM_ASSERT(b.captured != nullptr, "build_goldens needs a run with capture_tensors");
    if (b.entry.kind != BoundaryKind::check) kept.push_back(i);
  }
  const std::vector<std::string> bases = base_names(reference, kept);

  struct Family {
    const char* prefix;
    format::Dtype dtype;
  };
  std::vector<Family> families;
  if (options.write_f64) families.push_back({"f64/", format::Dtype::f64});
  if (options.write_f32) families.push_back({"f32/", format::Dtype::f32});
  families.push_back({"u8/", format::Dtype::u8});

  GoldenSet set;
  for (const Family& family : families) {
    for (std::size_t k = 0; k < kept.size(); ++k) {
      const BoundaryResult& b = reference.boundaries[kept[k]];
      const CapturedBoundary& captured = *b.captured;
      const bool mask = is_mask(b.entry, captured);
      if (mask != (family.dtype == format::Dtype::u8)) continue;
      auto raw = [&](std::string name, const Shape& shape, const CapturedValues& values) {
        if (family.dtype == format::Dtype::f64) return raw_f64(std::move(name), extents(shape), values.f64);
        if (family.dtype == format::Dtype::f32) return raw_f32(std::move(name), extents(shape), values.f32);
        return raw_u8(std::move(name), extents(shape), values.f64);
      };
      const std::string name = family.prefix + bases[k];
      if (captured.has_dense) {
        set.entries.push_back({raw(name, b.entry.global, captured.dense), "", kept[k], -1, ""});
      }
      for (std::size_t r = 0; r < captured.ranks.size(); ++r) {
        const int rank = static_cast<int>(r);
        const std::string slice = slice_label(b.entry, rank);
        set.entries.push_back({raw(shard_name(name, b.entry, rank), b.entry.ranks[r].local_shape,
                                   captured.ranks[r]),
                               "", kept[k], rank, slice});
      }
    }
  }

  std::set<std::string> files;
  for (GoldenEntry& entry : set.entries) {
    if (options.format == GoldenFormat::safetensors) {
      entry.file = std::string(format::kGoldenSafetensorsFile);
    } else {
      entry.file = npy_file_name(entry.tensor.name);
      if (!files.insert(entry.file).second) {
        throw InputError("golden tensor '" + entry.tensor.name + "' would share the npy file '" +
                         entry.file + "' with another tensor; rename a tensor in the scenario");
      }
    }
  }

  const std::string scenario_sha = sha256_hex(scenario.text);
  Json tensors = Json::array();
  for (const GoldenEntry& entry : set.entries) {
    const TraceEntry& e = reference.boundaries[entry.boundary].entry;
    const Shape& shape = entry.rank < 0 ? e.global : e.ranks[static_cast<std::size_t>(entry.rank)].local_shape;
    Json item{{"name", entry.tensor.name},
              {"file", entry.file},
              {"dtype", format::dtype_info(entry.tensor.dtype).safetensors},
              {"shape", entry.tensor.shape},
              {"axes", axis_names(shape)},
              {"role", entry.rank < 0 ? "global" : "shard"},
              {"rank", entry.rank < 0 ? Json(nullptr) : Json(entry.rank)},
              {"slice", entry.rank < 0 ? Json(nullptr) : Json(entry.slice)}};
    Json offset = Json::object();
    if (entry.rank >= 0) {
      for (const auto& [axis, begin] : e.ranks[static_cast<std::size_t>(entry.rank)].offset) {
        offset[axis] = begin;
      }
    }
    item["offset"] = offset;
    item["boundary"] = Json{{"id", e.id},         {"step", e.step},   {"chunk", e.chunk},
                            {"kind", boundary_kind_name(e.kind)},     {"op", e.op},       {"tensor", e.tensor},
                            {"dense", e.dense},   {"exact_claimed", e.exact}};
    item["global_shape"] = shape_json(e.global);
    item["placement"] = e.layout.str();
    Json ranks = Json::array();
    for (const RankExtent& r : e.ranks) ranks.push_back(rank_json(r));
    item["ranks"] = ranks;
    item["sha256"] = sha256_hex(entry.tensor.bytes);
    tensors.push_back(std::move(item));
  }
  Json dtypes = Json::array();
  for (const Family& family : families) {
    if (family.dtype != format::Dtype::u8) dtypes.push_back(std::string(family.prefix, 3));
  }
  const std::string precision = reference.precision.name();
  Json manifest{
      {"format", format::kManifestFormat},
      {"format_version", format::kManifestFormatVersion},
      {"shardsim_version", kShardsimVersion},
      {"scenario", scenario_json(scenario, scenario_sha)},
      {"precision", precision},
      {"significand_bits", reference.significand_bits},
      {"reduce_order", reduce_order_name(reference.reduce_order)},
      {"schedule", reference.schedule.str()},
      {"ranks", scenario.mesh.ranks()},
      {"faults", scenario.fault_names()},
      {"verdict", reference.pass ? "pass" : "fail"},
      {"storage", options.format == GoldenFormat::safetensors ? "safetensors" : "npy"},
      {"dtypes", dtypes},
      {"tensors", tensors}};
  set.manifest = manifest.dump(2) + "\n";

  if (options.format == GoldenFormat::safetensors) {
    std::vector<RawTensor> raws;
    for (const GoldenEntry& entry : set.entries) raws.push_back(entry.tensor);
    set.safetensors = encode_safetensors(
        raws, {{"format", std::string(format::kManifestFormat)},
               {"shardsim_version", kShardsimVersion},
               {"scenario", scenario.name},
               {"scenario_sha256", scenario_sha},
               {"precision", precision},
               {"reduce_order", std::string(reduce_order_name(reference.reduce_order))},
               {"manifest", std::string(format::kManifestFile)}});
  }
  return set;
}

void prepare_golden_dir(const std::string& dir) {
  if (dir.empty()) throw InputError("--golden needs a directory");
  struct stat info {};
  if (::stat(dir.c_str(), &info) == 0) {
    if (!S_ISDIR(info.st_mode)) throw InputError(dir + ": exists and is not a directory");
    if (::access(dir.c_str(), W_OK) != 0) throw InputError(dir + ": directory is not writable");
    return;
  }
  std::string parent = dir;
  while (parent.size() > 1 && parent.back() == '/') parent.pop_back();
  const std::size_t slash = parent.find_last_of('/');
  parent = slash == std::string::npos ? "." : parent.substr(0, slash + 1);
  struct stat parent_info {};
  if (::stat(parent.c_str(), &parent_info) != 0 || !S_ISDIR(parent_info.st_mode)) {
    throw InputError(dir + ": parent directory '" + parent + "' does not exist");
  }
  if (::access(parent.c_str(), W_OK) != 0) {
    throw InputError(dir + ": parent directory '" + parent + "' is not writable");
  }
}

void write_goldens(const std::string& dir, const GoldenSet& set, const GoldenOptions& options) {
  prepare_golden_dir(dir);
  const bool created = ::mkdir(dir.c_str(), 0755) == 0;
  if (!created && errno != EEXIST) {
    throw InputError(dir + ": cannot create the directory: " + std::strerror(errno));
  }
  const std::string prefix = dir.ends_with('/') ? dir : dir + "/";
  // One unit (io.hpp): every file is complete before any is renamed, the manifest last; an error
  // or SIGINT/SIGTERM leaves the previous files (or, in a new directory, nothing).
  std::vector<std::string> npy;
  std::vector<std::pair<std::string, std::string_view>> files;
  if (options.format == GoldenFormat::safetensors) {
    files.emplace_back(prefix + std::string(format::kGoldenSafetensorsFile), set.safetensors);
  } else {
    npy.reserve(set.entries.size());
    for (const GoldenEntry& entry : set.entries) {
      npy.push_back(encode_npy(entry.tensor));
      files.emplace_back(prefix + entry.file, npy.back());
    }
  }
  files.emplace_back(prefix + std::string(format::kManifestFile), set.manifest);
  write_files_atomically(files, created ? dir : std::string());
}

}  // namespace shardsim
