// Reads `clip_grad_norm` and `fsdp = { style, dim, param_dtype, reduce_dtype }` (docs/layouts.md
// "Fully sharded data parallelism"): the units (one per step that names parameters) and every rule
// that keeps their layouts those of FSDP1 (flat) and FSDP2 (per_param).
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/trace.hpp"
#include "scenario/loader.hpp"

namespace shardsim {

std::string_view fsdp_style_name(FsdpSpec::Style style) {
  return style == FsdpSpec::Style::flat ? "flat" : "per_param";
}

const FsdpSpec::Unit* FsdpSpec::unit_of_step(int step) const {
  for (const Unit& unit : units) {
    if (unit.step == step) return &unit;
  }
  return nullptr;
}

const FsdpSpec::Unit* FsdpSpec::unit_of_param(std::string_view name) const {
  for (const Unit& unit : units) {
    if (std::find(unit.params.begin(), unit.params.end(), name) != unit.params.end()) return &unit;
  }
  return nullptr;
}

namespace {

// The mesh dim FSDP shards over when `dim` is not given: "dp", else "fsdp", else the only dim
// of a 1-D mesh; -1 when none applies.
int default_fsdp_dim(const Mesh& mesh) {
  if (int d = mesh.find_dim("dp"); d >= 0) return d;
  if (int d = mesh.find_dim("fsdp"); d >= 0) return d;
  return mesh.ndim() == 1 ? 0 : -1;
}

}  // namespace

void Loader::fsdp(const toml::table& root, Scenario& s) const {
  if (const toml::node* v = root.get("clip_grad_norm")) {
    const double max_norm = number(*v, "clip_grad_norm");
    if (!(max_norm > 0) || !(max_norm <= std::numeric_limits<float>::max())) {
      fail(*v, "clip_grad_norm",
           "clip_grad_norm must be > 0 and within the f32 range, got " + format_number(max_norm));
    }
    if (s.train_steps == 0) fail(*v, "clip_grad_norm", "clipping needs train_steps");
    s.clip_grad_norm = max_norm;
  }
  const toml::node* node = root.get("fsdp");
  if (!node) return;
  const toml::table& t = table(*node, "fsdp");
  check_keys(t, "fsdp", {"style", "dim", "param_dtype", "reduce_dtype"});
  if (s.micro_batches >= 2) {
    fail(*node, "fsdp",
         "fsdp with micro_batches >= 2 is not supported: the runner gathers and reduce-scatters "
         "a unit once per forward and backward, not once per micro-batch (FSDP's no_sync "
         "accumulation of unsharded gradients is not modelled); use one or the other");
  }
  FsdpSpec spec;
  spec.loc = loc_of(*node);
  spec.param_dtype = fsdp_dtype(t, "param_dtype");
  spec.reduce_dtype = fsdp_dtype(t, "reduce_dtype");
  // As FSDP's MixedPrecision (and FSDP2's MixedPrecisionPolicy): no reduce_dtype reduces in
  // param_dtype, the dtype of the gradients.
  if (!spec.reduce_dtype) spec.reduce_dtype = spec.param_dtype;
  const toml::node* style = t.get("style");
  if (!style) fail(*node, "fsdp", "missing required key 'style' (\"flat\" or \"per_param\")");
  const std::string style_name = string(*style, "fsdp.style");
  if (style_name == "flat") {
    spec.style = FsdpSpec::Style::flat;
  } else if (style_name == "per_param") {
    spec.style = FsdpSpec::Style::per_param;
  } else {
    fail(*style, "fsdp.style",
         "unknown style " + quote(style_name) +
             " (known: flat (FSDP1 FlatParameter), per_param (FSDP2 dim-0 shards))");
  }
  const Mesh& mesh = s.mesh.devices;
  spec.dim = default_fsdp_dim(mesh);
  if (const toml::node* dim = t.get("dim")) {
    const std::string name = string(*dim, "fsdp.dim");
    spec.dim = mesh.find_dim(name);
    if (spec.dim < 0) {
      std::vector<std::string> names;
      for (const MeshDim& d : mesh.dims()) names.push_back(d.name);
      const std::string hint = nearest(name, names);
      fail(*dim, "fsdp.dim",
           "unknown mesh dim " + quote(name) + " (the mesh has " + mesh.str() + ")" +
               (hint.empty() ? "" : "; did you mean " + quote(hint) + "?"));
    }
  } else if (spec.dim < 0) {
    fail(*node, "fsdp", "the mesh (" + mesh.str() + ") has no dim named dp or fsdp: give dim");
  }
  if (const toml::node* stream = root.get("stream")) {
    fail(*stream, "stream", "fsdp with [stream] is not supported: give one or the other");
  }
  fsdp_units(s, spec);
  s.fsdp = std::move(spec);
}

// `fsdp.KEY` (param_dtype or reduce_dtype): one of the dtypes FSDP's MixedPrecision takes.
std::optional<Precision> Loader::fsdp_dtype(const toml::table& t, const char* key) const {
  const toml::node* v = t.get(key);
  if (!v) return std::nullopt;
  const std::string path = std::string("fsdp.") + key;
  const std::string text = string(*v, path);
  for (const char* known : {"bf16", "f16", "f32", "f64"}) {
    if (text == known) return parse_precision(text);
  }
  const std::string hint = nearest(text, {"bf16", "f16", "f32", "f64"});
  fail(*v, path,
       "unknown dtype " + quote(text) +
           " (known: bf16, f16, f32, f64; mp levels are run "
           "precisions, not storage dtypes)" +
           (hint.empty() ? "" : "; did you mean " + quote(hint) + "?"));
  return std::nullopt;
}

// One unit per step that names parameters. A parameter belongs to one step only, is Replicate on
// the fsdp dim in its declared placement (the layout its step computes with), and its storage
// layout must be FSDP's (see FsdpSpec).
void Loader::fsdp_units(const Scenario& s, FsdpSpec& spec) const {
  std::map<std::string, int> owner;  // parameter -> the step that names it
  for (const StepSpec& step : s.steps) {
    FsdpSpec::Unit unit{step.index, part_name("flat_param", step.output()), {}};
    for (const TensorSpec& tensor : s.tensors) {
      if (tensor.role != TensorRole::parameter) continue;
      const StepValue* named = nullptr;
      std::string key;
      for (const auto& [k, value] : step.params) {
        const auto* text = std::get_if<std::string>(&value.value);
        if (text && *text == tensor.name && k != "output") {
          named = &value;
          key = k;
        }
      }
      if (!named) continue;
      const std::string path = "steps[" + std::to_string(step.index) + "]." + key;
      if (auto it = owner.find(tensor.name); it != owner.end()) {
        fail_at(named->loc, path,
                "under fsdp a parameter belongs to one step's unit; " + quote(tensor.name) +
                    " is already named by steps[" + std::to_string(it->second) + "]");
      }
      owner[tensor.name] = step.index;
      fsdp_check_param(s, tensor, spec);
      unit.params.push_back(tensor.name);
    }
    if (!unit.params.empty()) spec.units.push_back(std::move(unit));
  }
}

void Loader::fsdp_check_param(const Scenario& s, const TensorSpec& tensor,
                              const FsdpSpec& spec) const {
  const Mesh& mesh = s.mesh.devices;
  const std::string dim_name = mesh.dim(spec.dim).name;
  const std::string where = "tensors[" + std::to_string(&tensor - s.tensors.data()) + "].placement";
  if (!tensor.layout.on(spec.dim).is_replicate()) {
    fail_at(tensor.loc, where,
            "under fsdp a parameter is Replicate on " + quote(dim_name) +
                " (the layout its step computes with); fsdp shards it there itself, but " +
                quote(tensor.name) + " has " + tensor.layout.str());
  }
  for (int d = 0; d < mesh.ndim(); ++d) {
    const Placement& p = tensor.layout.on(d);
    if (d == spec.dim || !p.is_shard()) continue;
    if (spec.style == FsdpSpec::Style::flat) {
      fail_at(tensor.loc, where,
              "fsdp style \"flat\" flattens whole parameters: " + quote(tensor.name) +
                  " is sharded on mesh dim " + quote(mesh.dim(d).name) +
                  "; use style = \"per_param\" (FSDP2) with tensor parallelism");
    }
    const std::string& first = tensor.shape[0].name;
    if (d > spec.dim && p.axis == first) {
      fail_at(tensor.loc, where,
              "fsdp per_param shards the first axis " + quote(first) + " of " + quote(tensor.name) +
                  " inside its " + quote(mesh.dim(d).name) +
                  " shard (FSDP2's _StridedShard), and shardsim nests shards in mesh order: "
                  "write " +
                  quote(dim_name) + " after " + quote(mesh.dim(d).name) +
                  " in mesh.dims (e.g. dims = { " + mesh.dim(d).name + " = " +
                  std::to_string(mesh.dim(d).size) + ", " + dim_name + " = " +
                  std::to_string(mesh.dim(spec.dim).size) + " })");
    }
  }
}

void Loader::check_fsdp_fault(const toml::node& node, const std::string& path, Fault fault,
                              const Scenario& s) const {
  const std::string name(fault_name(fault));
  const bool fsdp_fault = name.starts_with("fsdp_");
  if (fsdp_fault && !s.fsdp) {
    fail(node, path, "fault " + quote(name) + " changes fsdp; it needs fsdp = { style, dim }");
  }
  if (fsdp_fault && s.train_steps == 0) {
    fail(node, path, "fault " + quote(name) + " changes fsdp training; it needs train_steps");
  }
  if (fault == Fault::fsdp_clip_padding &&
      (s.fsdp->style != FsdpSpec::Style::flat || !s.clip_grad_norm)) {
    fail(node, path,
         "fault 'fsdp_clip_padding' needs fsdp style \"flat\" (the padded flat buffer) and "
         "clip_grad_norm");
  }
  if (fault == Fault::fsdp_reduce_dtype_bf16 &&
      !(s.fsdp->reduce_dtype && s.fsdp->reduce_dtype->kind != ScalarKind::bf16)) {
    fail(node, path,
         "fault 'fsdp_reduce_dtype_bf16' reduces in bf16 where the scenario declares a wider "
         "reduce_dtype: give fsdp.reduce_dtype = \"f32\" (or \"f64\")");
  }
  const bool replicated_grad_fault = fault == Fault::unreduced_param_grads ||
                                     fault == Fault::grad_reduce_mean ||
                                     fault == Fault::grad_reduce_wrong_dim;
  if (replicated_grad_fault && s.fsdp) {
    fail(node, path,
         "fault " + quote(name) +
             " changes the all-reduce of replicated parameters' gradients, which fsdp replaces "
             "by a reduce-scatter (see the fsdp_* faults)");
  }
}

}  // namespace shardsim
