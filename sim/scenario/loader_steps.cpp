// Reads a scenario file's steps (each checked against its op's entry in the op table),
// [stream], faults and [expect].
#include <iterator>

#include "scenario/loader.hpp"

namespace shardsim {

StepSpec Loader::step(const toml::node& node, int index, const Mesh& mesh) const {
  const std::string path = "steps[" + std::to_string(index) + "]";
  const toml::table& t = table(node, path);
  StepSpec spec;
  spec.index = index;
  spec.loc = loc_of(node);
  const toml::node* op = t.get("op");
  if (!op) fail(node, path, "missing required key 'op'");
  const std::string op_text = string(*op, path + ".op");
  const std::optional<OpKind> kind = find_op(op_text);
  if (!kind) {
    const std::vector<std::string> op_names(std::begin(kOpNames), std::end(kOpNames));
    const std::string hint = nearest(op_text, op_names);
    fail(*op, path + ".op",
         "unknown op " + quote(op_text) +
             (hint.empty() ? "" : " (did you mean " + quote(hint) + "?)"));
  }
  spec.kind = *kind;
  const OpEntry& entry = find_op_entry(spec.kind);
  std::vector<std::string> allowed{"op", "mesh_dim"};
  for (const ParamSchema& p : entry.schema.params) allowed.push_back(p.key);
  check_keys(t, path, allowed);
  spec.mesh_dim = step_mesh_dim(t, path, mesh);
  for (const ParamSchema& p : entry.schema.params) {
    const toml::node* value = t.get(p.key);
    if (!value) {
      if (p.required) fail(node, path, "op " + quote(op_text) + " needs key " + quote(p.key));
      continue;
    }
    spec.params.emplace(p.key, param(*value, path + "." + p.key, p));
  }
  spec.args = entry.parse(spec);
  return spec;
}

// The mesh dim a step's collectives run on: `mesh_dim = "tp"`. Required on a mesh of two or
// more dims; on a 1-D mesh it may be omitted (or name that dim).
int Loader::step_mesh_dim(const toml::table& t, const std::string& path, const Mesh& mesh) const {
  const toml::node* value = t.get("mesh_dim");
  if (!value) {
    if (mesh.ndim() == 1) return 0;
    fail(t, path,
         "on a mesh of " + std::to_string(mesh.ndim()) + " dims (" + mesh.str() +
             ") a step names the dim it runs on: mesh_dim = \"" + mesh.dim(mesh.ndim() - 1).name +
             "\" or another");
  }
  const std::string name = string(*value, path + ".mesh_dim");
  const int dim = mesh.find_dim(name);
  if (dim < 0) {
    std::vector<std::string> names;
    for (const MeshDim& d : mesh.dims()) names.push_back(d.name);
    const std::string hint = nearest(name, names);
    fail(*value, path + ".mesh_dim",
         "unknown mesh dim '" + name + "' (the mesh is " + mesh.str() + ")" +
             (hint.empty() ? "" : "; did you mean '" + hint + "'?"));
  }
  return dim;
}

// One step parameter's raw value, checked against its schema row: type, choices, bounds, and
// for a placement its syntax.
StepValue Loader::param(const toml::node& value, const std::string& key_path,
                        const ParamSchema& p) const {
  StepValue v{{}, loc_of(value)};
  switch (p.type) {
    case ParamType::tensor:
    case ParamType::output:
    case ParamType::placement:
    case ParamType::string: {
      std::string s = string(value, key_path);
      if (!p.choices.empty() &&
          std::find(p.choices.begin(), p.choices.end(), s) == p.choices.end()) {
        std::string known;
        for (const std::string& c : p.choices) known += (known.empty() ? "" : ", ") + c;
        fail(value, key_path, "unknown value " + quote(s) + " (known: " + known + ")");
      }
      if (p.type == ParamType::placement) wrap(value, key_path, [&] { return parse_placement(s); });
      v.value = std::move(s);
      break;
    }
    case ParamType::number: {
      const double x = number(value, key_path);
      check_bounds(value, key_path, p, x, [&] { return format_number(x); });
      v.value = x;
      break;
    }
    case ParamType::integer: {
      const std::int64_t n = integer(value, key_path);
      check_bounds(value, key_path, p, static_cast<double>(n), [&] { return std::to_string(n); });
      v.value = n;
      break;
    }
    case ParamType::integer_list: {
      const toml::array& list = array(value, key_path);
      std::vector<std::int64_t> ints;
      for (std::size_t i = 0; i < list.size(); ++i) {
        ints.push_back(integer(*list.get(i), key_path + "[" + std::to_string(i) + "]"));
      }
      v.value = std::move(ints);
      break;
    }
    case ParamType::boolean:
      if (!value.is_boolean()) {
        fail(value, key_path, "expected a boolean, got " + type_name(value));
      }
      v.value = *value.value<bool>();
      break;
  }
  return v;
}

// [stream]: the chunk lengths must be positive and sum to the stream axis' extent in every
// input and target that has the axis.
StreamSpec Loader::stream(const toml::table& t, const Scenario& s) const {
  check_keys(t, "stream", {"axis", "chunks"});
  StreamSpec spec;
  spec.loc = loc_of(t);
  const toml::node* axis = t.get("axis");
  if (!axis) fail(t, "stream", "missing required key 'axis'");
  spec.axis = string(*axis, "stream.axis");
  const toml::node* chunks = t.get("chunks");
  if (!chunks) fail(t, "stream", "missing required key 'chunks'");
  const toml::array& list = array(*chunks, "stream.chunks");
  if (list.empty()) fail(*chunks, "stream.chunks", "needs at least one chunk length");
  std::int64_t total = 0;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string path = "stream.chunks[" + std::to_string(i) + "]";
    const std::int64_t n = integer(*list.get(i), path);
    if (n < 1) {
      fail(*list.get(i), path, "a chunk length must be positive, got " + std::to_string(n));
    }
    if (__builtin_add_overflow(total, n, &total)) {
      fail(*list.get(i), path, "chunk lengths overflow a 64-bit integer");
    }
    spec.chunks.push_back(n);
  }
  bool streamed = false;
  for (const TensorSpec& tensor : s.tensors) {
    if (tensor.role == TensorRole::parameter || !tensor.shape.has(spec.axis)) continue;
    streamed = true;
    if (tensor.shape.extent(spec.axis) != total) {
      fail(*chunks, "stream.chunks",
           "chunk lengths sum to " + std::to_string(total) + " but tensor '" + tensor.name + "' " +
               tensor.shape.str() + " has " + spec.axis + "=" +
               std::to_string(tensor.shape.extent(spec.axis)));
    }
  }
  if (!streamed) {
    fail(*axis, "stream.axis", "no input or target has an axis " + quote(spec.axis) + " to stream");
  }
  for (const StepSpec& step : s.steps) {
    if (step.kind == OpKind::cross_entropy) {
      throw LocatedError(located(file_, step.loc, "steps[" + std::to_string(step.index) + "]",
                                 "cross_entropy reads its labels by global token, and [stream] "
                                 "cuts the tokens into chunks; it is not supported with [stream]"));
    }
    if (step.kind == OpKind::gqa_attention && spec.axis == "seq") {
      throw LocatedError(located(file_, step.loc, "steps[" + std::to_string(step.index) + "]",
                                 "gqa_attention keeps no KV cache across streamed chunks (each "
                                 "chunk would attend only to itself, at positions from 0); it "
                                 "is not supported with [stream] on seq "
                                 "(sliding_window_attention streams)"));
    }
    if (step.kind == OpKind::mse_loss && step.has("valid_lengths")) {
      throw LocatedError(located(file_, step.params.at("valid_lengths").loc,
                                 "steps[" + std::to_string(step.index) + "].valid_lengths",
                                 "valid_lengths counts tokens of the whole sequence, which "
                                 "[stream] cuts into chunks; it is not supported with [stream]"));
    }
  }
  return spec;
}

// A fault name that exists and changes something this scenario runs: one of its ops, or the
// training loop.
Fault Loader::fault(const toml::node& node, const std::string& path, const Scenario& s) const {
  const std::string name = string(node, path);
  const std::optional<Fault> fault = find_fault(name);
  if (!fault) {
    const std::vector<std::string> known(std::begin(kFaultNames), std::end(kFaultNames));
    const std::string hint = nearest(name, known);
    fail(node, path,
         "unknown fault " + quote(name) +
             (hint.empty() ? "" : " (did you mean " + quote(hint) + "?)"));
  }
  if (s.has_fault(*fault)) fail(node, path, "fault " + quote(name) + " is listed twice");
  const FaultInfo& info = fault_catalogue()[static_cast<std::size_t>(*fault)];
  if (*fault == Fault::micro_batch_mean && (s.micro_batches < 2 || s.train_steps == 0)) {
    fail(node, path,
         "fault " + quote(name) +
             " changes how micro-batch losses are normalized; it needs "
             "micro_batches >= 2 and train_steps");
  }
  check_fsdp_fault(node, path, *fault, s);
  if (info.ops.empty()) {
    if (s.train_steps == 0) {
      fail(node, path, "fault " + quote(name) + " changes the training loop; it needs train_steps");
    }
    if (*fault == Fault::grad_reduce_wrong_dim && s.mesh.devices.ndim() < 2) {
      fail(node, path, "fault '" + name + "' needs a mesh of two or more dims ([mesh] dims)");
    }
    return *fault;
  }
  std::string ops;
  for (OpKind op : info.ops) {
    for (const StepSpec& step : s.steps) {
      if (step.kind == op) return *fault;
    }
    ops += (ops.empty() ? "" : ", ") + std::string(op_name(op));
  }
  fail(node, path,
       "fault " + quote(name) + " applies to " + ops + ", which this scenario does not use");
}

Expectation Loader::expect(const toml::table& t, const Scenario& s) const {
  check_keys(t, "expect", {"verdict", "step", "chunk", "micro", "tensor", "op"});
  Expectation e;
  e.loc = loc_of(t);
  for (auto&& [key, value] : t) e.keys[std::string(key.str())] = loc_of(value);
  if (const toml::node* v = t.get("verdict")) {
    const std::string verdict = string(*v, "expect.verdict");
    if (verdict != "pass" && verdict != "fail") {
      fail(*v, "expect.verdict", "verdict must be \"pass\" or \"fail\", got " + quote(verdict));
    }
    e.pass = verdict == "pass";
  }
  for (const char* key : {"step", "chunk"}) {
    if (const toml::node* v = t.get(key)) {
      const std::int64_t n = integer(*v, std::string("expect.") + key);
      const bool step = std::string(key) == "step";
      const std::int64_t most =
          step ? std::max(1, s.train_steps)
               : static_cast<std::int64_t>(s.stream ? s.stream->chunks.size() : 1);
      if (n < 1 || n > most) {
        fail(*v, std::string("expect.") + key,
             std::string("must be in [1, ") + std::to_string(most) + "]: the scenario runs " +
                 std::to_string(most) + (step ? " training step(s)" : " streamed chunk(s)") +
                 ", got " + std::to_string(n));
      }
      (std::string(key) == "step" ? e.step : e.chunk) = static_cast<int>(n);
    }
  }
  if (const toml::node* v = t.get("micro")) {
    const std::int64_t n = integer(*v, "expect.micro");
    if (s.micro_batches < 2) fail(*v, "expect.micro", "needs micro_batches >= 2");
    if (n < 1 || n > s.micro_batches) {
      fail(*v, "expect.micro",
           "must be in [1, " + std::to_string(s.micro_batches) + "]: the scenario runs " +
               std::to_string(s.micro_batches) + " micro-batches per step, got " +
               std::to_string(n));
    }
    e.micro = static_cast<int>(n);
  }
  if (const toml::node* v = t.get("tensor")) e.tensor = string(*v, "expect.tensor");
  if (const toml::node* v = t.get("op")) e.op = string(*v, "expect.op");
  if (e.pass && (e.step || e.chunk || e.micro || e.tensor || e.op)) {
    fail(t, "expect", "a first divergence (step/chunk/micro/tensor/op) needs verdict = \"fail\"");
  }
  return e;
}

}  // namespace shardsim
