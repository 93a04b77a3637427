// The golden manifest (docs/goldens.md "The manifest"): what it records about the run, each
// boundary that has goldens (with its op's parameters), and each tensor; its digest.
#include "golden/manifest.hpp"

#include <set>

#include "core/sha256.hpp"
#include "report/report.hpp"

namespace shardsim::golden_detail {

namespace {

std::vector<std::string> axis_names(const Shape& shape) {
  std::vector<std::string> out;
  for (const Axis& axis : shape.axes()) out.push_back(axis.name);
  return out;
}

Json param_json(const ParamValue& value) {
  return std::visit(
      [](const auto& v) -> Json {
        if constexpr (std::is_same_v<std::decay_t<decltype(v)>, std::monostate>) {
          return nullptr;
        } else {
          return v;
        }
      },
      value);
}

// A boundary's parameters: the op's keys for a step's boundary (defaults filled in), the
// learning rate for a parameter update (AdamW: its hyperparameters and the training step, which
// is its update count t without [stream]), null otherwise.
Json params_json(const Scenario& scenario, const TraceEntry& e) {
  if (e.scenario_step >= 0) {
    Json out = Json::object();
    const StepSpec& step = scenario.steps.at(static_cast<std::size_t>(e.scenario_step));
    for (const ResolvedParam& p : resolved_params(step, scenario)) out[p.key] = param_json(p.value);
    return out;
  }
  if (e.kind == BoundaryKind::update && scenario.adamw()) {
    const Scenario::Optimizer& o = scenario.optimizer;
    return Json{{"optimizer", "adamw"},           {"learning_rate", scenario.learning_rate},
                {"betas", {o.beta1, o.beta2}},    {"eps", o.eps},
                {"weight_decay", o.weight_decay}, {"update", e.step}};
  }
  if (e.kind == BoundaryKind::update) return Json{{"learning_rate", scenario.learning_rate}};
  return nullptr;
}

Json boundaries_json(const Scenario& scenario, const RunReport& reference, const GoldenSet& set) {
  std::set<std::size_t> used;
  for (const GoldenEntry& entry : set.entries) used.insert(entry.boundary);
  Json out = Json::array();
  for (std::size_t b : used) {
    const TraceEntry& e = golden_boundary(set, reference, b);
    const StepSpec* step = e.scenario_step >= 0
                               ? &scenario.steps.at(static_cast<std::size_t>(e.scenario_step))
                               : nullptr;
    Json item{{"id", e.id}, {"step", e.step}, {"chunk", e.chunk}};
    if (e.micro_count > 0) item["micro"] = e.micro;  // only in micro-batched runs
    item.update(Json{{"kind", boundary_kind_name(e.kind)},
                     {"op", e.op},
                     {"tensor", e.tensor},
                     {"scenario_step", step ? Json(step->index) : Json(nullptr)},
                     {"scenario_op", step ? Json(std::string(step->op())) : Json(nullptr)},
                     {"params", params_json(scenario, e)}});
    out.push_back(std::move(item));
  }
  return out;
}

// The manifest's "scenario": name, SHA-256 and text, and "input_files" when some tensor is read
// from a file (init = { file, tensor }): which file, its SHA-256, so that a golden set names
// exactly what it was computed from.
Json scenario_json(const Scenario& scenario) {
  Json out{{"name", scenario.name}, {"sha256", sha256_hex(scenario.text)}, {"text", scenario.text}};
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

Json tensor_json(const GoldenEntry& entry, const TraceEntry& e) {
  const Mesh& mesh = *e.mesh;
  const Shape& shape =
      entry.rank < 0 ? e.global : e.ranks[static_cast<std::size_t>(entry.rank)].local_shape;
  Json item{{"name", entry.tensor.name},
            {"file", entry.file},
            {"dtype", format::dtype_info(entry.tensor.dtype).safetensors},
            {"shape", entry.tensor.shape},
            {"axes", axis_names(shape)},
            {"role", entry.rank < 0 ? "global" : "shard"},
            {"rank", entry.rank < 0 ? Json(nullptr) : Json(entry.rank)},
            {"slice", entry.rank < 0 ? Json(nullptr) : Json(entry.slice)}};
  item["offset"] =
      entry.rank < 0 ? Json::object() : offset_json(e.global, e.layout, mesh, entry.rank);
  if (entry.rank >= 0) {
    Json runs = runs_json(e.global, e.layout, mesh, entry.rank);
    if (!runs.empty()) item["runs"] = std::move(runs);
  }
  Json boundary{{"id", e.id}, {"step", e.step}, {"chunk", e.chunk}};
  if (e.micro_count > 0) boundary["micro"] = e.micro;  // only in micro-batched runs
  boundary.update(Json{{"kind", boundary_kind_name(e.kind)},
                       {"op", e.op},
                       {"tensor", e.tensor},
                       {"dense", e.dense},
                       {"exact_claimed", e.exact}});
  item["boundary"] = std::move(boundary);
  item["global_shape"] = shape_json(e.global);
  item["placement"] = e.layout.str();
  item["ranks"] = ranks_json(e.global, e.layout, mesh);
  if (entry.budget) item["budget"] = tensor_budget_json(*entry.budget);
  item["sha256"] = sha256_hex(entry.tensor.bytes);
  if (entry.near_midpoint > 0) {  // dd/qd references only (golden_set.hpp)
    item["near_midpoint"] =
        Json{{"count", entry.near_midpoint}, {"first_index", entry.first_near_midpoint}};
  }
  return item;
}

}  // namespace

Json shape_json(const Shape& shape) {
  Json out = Json::object();
  for (const Axis& axis : shape.axes()) out[axis.name] = axis.extent;
  return out;
}

Json rank_json(const RankExtent& r) {
  Json offset = Json::object();
  for (const auto& [axis, begin] : r.offset) offset[axis] = begin;
  Json out{{"rank", r.rank}};
  if (r.coords.size() > 1) out["coords"] = r.coords;  // N-D meshes only
  out["local_shape"] = shape_json(r.local_shape);
  out["offset"] = offset;
  out["slice"] = r.slice;
  return out;
}

Json ranks_json(const Shape& global, const Layout& layout, const Mesh& mesh) {
  Json out = Json::array();
  for (const RankExtent& r : rank_extents(global, layout, mesh)) out.push_back(rank_json(r));
  return out;
}

std::string slice_label(const Shape& global, const Layout& layout, const Mesh& mesh, int rank) {
  std::string out;
  for (const Axis& axis : global.axes()) {
    if (!layout.shards(axis.name)) continue;
    const Slice slice = axis_slice(global, layout, mesh, rank, axis.name);
    out += (out.empty() ? "" : ",") + axis.name + "=" + slice_label_str(slice);
  }
  if (layout.has_partial()) return out.empty() ? "partial" : out + ",partial";
  return out.empty() ? "replicate" : out;
}

Json offset_json(const Shape& global, const Layout& layout, const Mesh& mesh, int rank) {
  Json out = Json::object();
  for (const Axis& axis : global.axes()) {
    if (layout.shards(axis.name))
      out[axis.name] = axis_slice(global, layout, mesh, rank, axis.name).begin;
  }
  return out;
}

Json runs_json(const Shape& global, const Layout& layout, const Mesh& mesh, int rank) {
  Json out = Json::object();
  for (const Axis& axis : global.axes()) {
    if (!layout.shards(axis.name)) continue;
    const Slice slice = axis_slice(global, layout, mesh, rank, axis.name);
    if (slice.contiguous()) continue;
    out[axis.name] = Json::array({Json::array({slice.begin, slice.end}),
                                  Json::array({slice.second_begin, slice.second_end})});
  }
  return out;
}

std::string shard_name(const std::string& name, const Mesh& mesh, int rank,
                       const std::string& slice) {
  std::string coords;
  if (mesh.ndim() > 1) {
    for (int d = 0; d < mesh.ndim(); ++d) {
      coords +=
          std::string(d ? "," : "(") + mesh.dim(d).name + "=" + std::to_string(mesh.coord(rank, d));
    }
    coords += ")";
  }
  return name + "@rank" + std::to_string(rank) + coords + "[" + slice + "]";
}

Json mesh_json(const Mesh& mesh) {
  Json out = Json::array();
  for (const MeshDim& dim : mesh.dims())
    out.push_back(Json{{"name", dim.name}, {"size", dim.size}});
  return out;
}

std::vector<std::pair<std::string, std::string>> safetensors_metadata(
    const std::string& version, const std::string& scenario, const std::string& scenario_sha256,
    const std::string& precision, const std::string& reduce_order) {
  return {{"format", std::string(format::kManifestFormat)},
          {"shardsim_version", version},
          {"scenario", scenario},
          {"scenario_sha256", scenario_sha256},
          {"precision", precision},
          {"reduce_order", reduce_order},
          {"manifest", std::string(format::kManifestFile)}};
}

std::string manifest_digest(std::string_view text, std::string_view value) {
  const std::string quoted = "\"" + std::string(value) + "\"";
  const std::size_t at = text.rfind(quoted);
  SHARDSIM_ASSERT(at != std::string_view::npos, "manifest_digest: the value is in the text");
  std::string zeroed(text);
  zeroed.replace(at + 1, value.size(), std::string(value.size(), '0'));
  return sha256_hex(zeroed);
}

std::string manifest_text(const Scenario& scenario, const RunReport& reference,
                          const GoldenSet& set, const GoldenOptions& options) {
  const std::vector<GoldenEntry>& entries = set.entries;
  Json tensors = Json::array();
  for (const GoldenEntry& entry : entries) {
    tensors.push_back(tensor_json(entry, golden_boundary(set, reference, entry.boundary)));
  }
  Json dtypes = Json::array();
  if (options.write_f64) dtypes.push_back("f64");
  if (options.write_f32) dtypes.push_back("f32");
  if (options.write_bf16) dtypes.push_back("bf16");
  if (options.write_f16) dtypes.push_back("f16");
  const std::string zeros(64, '0');
  Json manifest{{"format", format::kManifestFormat},
                {"format_version", format::kManifestFormatVersion},
                {"shardsim_version", kShardsimVersion},
                {"scenario", scenario_json(scenario)},
                {"precision", reference.precision.name()},
                {"significand_bits", reference.significand_bits},
                {"reduce_order", reduce_order_name(reference.reduce_order)},
                {"schedule", reference.schedule.str()},
                {"ranks", scenario.mesh.ranks()},
                {"faults", scenario.fault_names()},
                {"verdict", reference.pass ? "pass" : "fail"},
                {"storage", options.format == GoldenFormat::safetensors ? "safetensors" : "npy"},
                {"dtypes", dtypes},
                {"boundaries", boundaries_json(scenario, reference, set)},
                {"tensors", tensors},
                {std::string(kManifestDigestKey), zeros}};
  // N-D: the mesh's dims follow "ranks" (a 1-D manifest has no "mesh": its one dim is implied).
  // With BF16/F16 goldens, "budgets" follows "dtypes" (a manifest without has no "budgets").
  const bool mesh = scenario.mesh.devices.ndim() > 1;
  if (mesh || set.budgets) {
    Json with_keys = Json::object();
    for (auto& [key, value] : manifest.items()) {
      with_keys[key] = std::move(value);
      if (key == "ranks" && mesh) with_keys["mesh"] = mesh_json(scenario.mesh.devices);
      if (key == "dtypes" && set.budgets) with_keys["budgets"] = budgets_json(*set.budgets);
    }
    manifest = std::move(with_keys);
  }
  std::string text = manifest.dump(2) + "\n";
  const std::string digest = manifest_digest(text, zeros);
  text.replace(text.rfind("\"" + zeros + "\"") + 1, zeros.size(), digest);
  return text;
}

}  // namespace shardsim::golden_detail
