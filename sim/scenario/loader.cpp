#include "shardsim/scenario/scenario.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <set>
#include <toml++/toml.h>

#include "shardsim/error.hpp"
#include "shardsim/io.hpp"
#include "sim/scenario/op_entry.hpp"

namespace shardsim {

std::string_view role_name(TensorRole role) {
  switch (role) {
    case TensorRole::input: return "input";
    case TensorRole::parameter: return "parameter";
    case TensorRole::target: return "target";
  }
  return "?";
}

const std::string& StepSpec::str(const std::string& key) const {
  return std::get<std::string>(params.at(key).value);
}

const std::string& StepSpec::output() const { return str("output"); }

const TensorSpec* Scenario::find_tensor(std::string_view wanted) const {
  for (const TensorSpec& t : tensors) {
    if (t.name == wanted) return &t;
  }
  return nullptr;
}

bool Scenario::has_fault(Fault fault) const {
  return std::find(faults.begin(), faults.end(), fault) != faults.end();
}

std::vector<std::string> Scenario::fault_names() const {
  std::vector<std::string> names;
  for (Fault fault : faults) names.emplace_back(fault_name(fault));
  return names;
}

double Scenario::rtol(const Precision& precision) const {
  auto it = tolerance.find(precision.name());
  return it != tolerance.end() ? it->second : default_rtol(precision);
}

std::string located(const std::string& file, SourceLoc loc, const std::string& path,
                    const std::string& message) {
  std::string out = file;
  if (loc.line > 0) out += ":" + std::to_string(loc.line) + ":" + std::to_string(loc.column);
  out += ": ";
  if (!path.empty()) out += path + ": ";
  return out + message;
}

std::string nearest(std::string_view word, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_distance = SIZE_MAX;
  for (const std::string& candidate : candidates) {
    // Optimal-string-alignment distance (Levenshtein plus adjacent transpositions, so the
    // common typo "esp" for "eps" is one edit), one row at a time.
    std::vector<std::size_t> before(candidate.size() + 1), prev(candidate.size() + 1),
        row(candidate.size() + 1);
    for (std::size_t j = 0; j <= candidate.size(); ++j) row[j] = j;
    for (std::size_t i = 1; i <= word.size(); ++i) {
      before.swap(prev);
      prev.swap(row);
      row[0] = i;
      for (std::size_t j = 1; j <= candidate.size(); ++j) {
        row[j] = std::min({prev[j] + 1, row[j - 1] + 1,
                           prev[j - 1] + (word[i - 1] == candidate[j - 1] ? 0 : 1)});
        if (i > 1 && j > 1 && word[i - 1] == candidate[j - 2] && word[i - 2] == candidate[j - 1]) {
          row[j] = std::min(row[j], before[j - 2] + 1);
        }
      }
    }
    if (row[candidate.size()] < best_distance) {
      best_distance = row[candidate.size()];
      best = candidate;
    }
  }
  // Plausible: at most a third of the word changed (and at least one edit allowed).
  return best_distance <= std::max<std::size_t>(1, word.size() / 3) ? best : "";
}

const TensorState& StepContext::tensor(const StepSpec& step, const std::string& key) {
  const std::string& name = step.str(key);
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    std::vector<std::string> known;
    for (const auto& [defined, state] : tensors_) known.push_back(defined);
    std::string hint = nearest(name, known);
    fail(step, key,
         "tensor '" + name + "' is used before it is defined" +
             (hint.empty() ? std::string() : " (did you mean '" + hint + "'?)"));
  }
  return it->second;
}

void StepContext::define(const StepSpec& step, const std::string& key, TensorState state) {
  const std::string& name = step.str(key);
  if (tensors_.count(name)) fail(step, key, "duplicate tensor name '" + name + "'");
  tensors_.emplace(name, std::move(state));
}

void StepContext::fail(const StepSpec& step, const std::string& key, const std::string& message) {
  auto it = step.params.find(key);
  const SourceLoc loc = it != step.params.end() ? it->second.loc : step.loc;
  throw InputError(located(file_, loc, "steps[" + std::to_string(step.index) + "]." + key,
                           message));
}

namespace {

// A number as a message quotes it: shortest round-trip form ("1.5", "inf", "nan").
std::string format_number(double x) {
  char text[32];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(text, sizeof text, "%.*g", digits, x);
    if (std::strtod(text, nullptr) == x || x != x) break;
  }
  return text;
}

SourceLoc loc_of(const toml::node& node) {
  return {static_cast<int>(node.source().begin.line),
          static_cast<int>(node.source().begin.column)};
}

// Walks a parsed TOML document, turning every problem into a located InputError.
class Loader {
 public:
  explicit Loader(const std::string& file) : file_(file) {}

  [[noreturn]] void fail(const toml::node& node, const std::string& path,
                         const std::string& message) const {
    throw InputError(located(file_, loc_of(node), path, message));
  }

  // Rejects keys outside `allowed`, suggesting the nearest one.
  void check_keys(const toml::table& table, const std::string& path,
                  const std::vector<std::string>& allowed) const {
    for (auto&& [key, node] : table) {
      const std::string name(key.str());
      if (std::find(allowed.begin(), allowed.end(), name) != allowed.end()) continue;
      const std::string hint = nearest(name, allowed);
      throw InputError(located(file_, {static_cast<int>(key.source().begin.line),
                                       static_cast<int>(key.source().begin.column)},
                               path.empty() ? name : path + "." + name,
                               "unknown key '" + name + "'" +
                                   (hint.empty() ? "" : " (did you mean '" + hint + "'?)")));
    }
  }

  std::string string(const toml::node& node, const std::string& path) const {
    if (!node.is_string()) fail(node, path, "expected a string, got " + type_name(node));
    return *node.value<std::string>();
  }
  std::int64_t integer(const toml::node& node, const std::string& path) const {
    if (!node.is_integer()) fail(node, path, "expected an integer, got " + type_name(node));
    return *node.value<std::int64_t>();
  }
  double number(const toml::node& node, const std::string& path) const {
    if (!node.is_number()) fail(node, path, "expected a number, got " + type_name(node));
    return *node.value<double>();
  }
  const toml::table& table(const toml::node& node, const std::string& path) const {
    if (!node.is_table()) fail(node, path, "expected a table, got " + type_name(node));
    return *node.as_table();
  }
  const toml::array& array(const toml::node& node, const std::string& path) const {
    if (!node.is_array()) fail(node, path, "expected an array, got " + type_name(node));
    return *node.as_array();
  }

  static std::string type_name(const toml::node& node) {
    switch (node.type()) {
      case toml::node_type::string: return "a string";
      case toml::node_type::integer: return "an integer";
      case toml::node_type::floating_point: return "a float";
      case toml::node_type::boolean: return "a boolean";
      case toml::node_type::array: return "an array";
      case toml::node_type::table: return "a table";
      default: return "a date/time";
    }
  }

  // Runs `parse`, relocating a bare InputError to `node`.
  template <typename F>
  auto wrap(const toml::node& node, const std::string& path, F parse) const {
    try {
      return parse();
    } catch (const InputError& e) {
      fail(node, path, e.what());
    }
  }

  MeshSpec mesh(const toml::table& t) const {
    check_keys(t, "mesh", {"ranks", "reduce_order", "schedule"});
    MeshSpec mesh;
    const toml::node* ranks = t.get("ranks");
    if (!ranks) fail(t, "mesh", "missing required key 'ranks'");
    const std::int64_t n = integer(*ranks, "mesh.ranks");
    if (n < 1 || n > 4096) fail(*ranks, "mesh.ranks", "ranks must be in [1, 4096], got " +
                                                           std::to_string(n));
    mesh.ranks = static_cast<int>(n);
    if (const toml::node* order = t.get("reduce_order")) {
      mesh.reduce_order = wrap(*order, "mesh.reduce_order",
                               [&] { return parse_reduce_order(string(*order, "mesh.reduce_order")); });
    }
    if (const toml::node* schedule = t.get("schedule")) {
      mesh.schedule = wrap(*schedule, "mesh.schedule",
                           [&] { return parse_schedule(string(*schedule, "mesh.schedule")); });
    }
    return mesh;
  }

  InitSpec init(const toml::node& node, const std::string& path, std::uint64_t& seed) const {
    const toml::table& t = table(node, path);
    check_keys(t, path, {"dist", "low", "high", "mean", "std", "value", "seed"});
    InitSpec spec;
    const std::string dist = t.get("dist") ? string(*t.get("dist"), path + ".dist") : "uniform";
    if (dist == "uniform") {
      spec.dist = InitDist::uniform;
    } else if (dist == "normal") {
      spec.dist = InitDist::normal;
    } else if (dist == "constant") {
      spec.dist = InitDist::constant;
    } else {
      fail(*t.get("dist"), path + ".dist",
           "unknown distribution '" + dist + "' (known: uniform, normal, constant)");
    }
    if (auto* v = t.get("low")) spec.low = number(*v, path + ".low");
    if (auto* v = t.get("high")) spec.high = number(*v, path + ".high");
    if (auto* v = t.get("mean")) spec.mean = number(*v, path + ".mean");
    if (auto* v = t.get("std")) spec.stddev = number(*v, path + ".std");
    if (auto* v = t.get("value")) spec.value = number(*v, path + ".value");
    if (auto* v = t.get("seed")) {
      const std::int64_t s = integer(*v, path + ".seed");
      if (s < 0) fail(*v, path + ".seed", "seed must be >= 0");
      seed = static_cast<std::uint64_t>(s);
    }
    if (spec.dist == InitDist::uniform && !(spec.low < spec.high)) {
      fail(node, path, "uniform init needs low < high");
    }
    if (spec.dist == InitDist::normal && !(spec.stddev > 0)) {
      fail(node, path, "normal init needs std > 0");
    }
    return spec;
  }

  TensorSpec tensor(const toml::node& node, const std::string& path, std::uint64_t scenario_seed) {
    const toml::table& t = table(node, path);
    check_keys(t, path, {"name", "axes", "shape", "role", "init", "placement"});
    TensorSpec spec;
    spec.loc = loc_of(node);
    for (const char* key : {"name", "axes", "shape"}) {
      if (!t.get(key)) fail(node, path, std::string("missing required key '") + key + "'");
    }
    spec.name = string(*t.get("name"), path + ".name");
    if (spec.name.empty()) fail(*t.get("name"), path + ".name", "tensor name must not be empty");
    const toml::array& axes = array(*t.get("axes"), path + ".axes");
    const toml::array& shape = array(*t.get("shape"), path + ".shape");
    if (axes.size() != shape.size()) {
      fail(*t.get("shape"), path + ".shape",
           "shape has " + std::to_string(shape.size()) + " extents but axes names " +
               std::to_string(axes.size()));
    }
    std::vector<Axis> named;
    std::vector<std::int64_t> extents;
    for (std::size_t i = 0; i < axes.size(); ++i) {
      const std::string axis_path = path + ".axes[" + std::to_string(i) + "]";
      const std::string extent_path = path + ".shape[" + std::to_string(i) + "]";
      std::string axis = string(*axes.get(i), axis_path);
      const std::int64_t extent = integer(*shape.get(i), extent_path);
      if (extent <= 0) {
        fail(*shape.get(i), extent_path,
             "size of axis '" + axis + "' must be positive, got " + std::to_string(extent));
      }
      for (const Axis& seen : named) {
        if (seen.name == axis) fail(*axes.get(i), axis_path, "duplicate axis '" + axis + "'");
      }
      named.push_back({axis, extent});
      extents.push_back(extent);
    }
    if (!checked_numel(extents)) {
      fail(*t.get("shape"), path + ".shape", "element count of " + Shape(named).str() +
                                                 " overflows a 64-bit integer");
    }
    spec.shape = Shape(std::move(named));
    if (const toml::node* role = t.get("role")) {
      const std::string r = string(*role, path + ".role");
      if (r == "input") {
        spec.role = TensorRole::input;
      } else if (r == "parameter") {
        spec.role = TensorRole::parameter;
      } else if (r == "target") {
        spec.role = TensorRole::target;
      } else {
        fail(*role, path + ".role", "unknown role '" + r + "' (known: input, parameter, target)");
      }
    }
    spec.init_seed = scenario_seed ^ fnv1a64(spec.name);
    if (const toml::node* init_node = t.get("init")) {
      spec.init = init(*init_node, path + ".init", spec.init_seed);
    }
    if (const toml::node* placement = t.get("placement")) {
      spec.placement = wrap(*placement, path + ".placement",
                            [&] { return parse_placement(string(*placement, path + ".placement")); });
      if (spec.placement.is_shard() && !spec.shape.has(spec.placement.axis)) {
        fail(*placement, path + ".placement",
             "unknown axis '" + spec.placement.axis + "' in placement " + spec.placement.str() +
                 ": '" + spec.name + "' has axes " + spec.shape.str());
      }
    }
    return spec;
  }

  StepSpec step(const toml::node& node, int index) const {
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
      fail(*op, path + ".op", "unknown op '" + op_text + "'" +
                                  (hint.empty() ? "" : " (did you mean '" + hint + "'?)"));
    }
    spec.kind = *kind;
    const OpEntry& entry = find_op_entry(spec.kind);
    std::vector<std::string> allowed{"op"};
    for (const ParamSchema& p : entry.schema.params) allowed.push_back(p.key);
    check_keys(t, path, allowed);
    for (const ParamSchema& p : entry.schema.params) {
      const toml::node* value = t.get(p.key);
      if (!value) {
        if (p.required) fail(node, path, "op '" + op_text + "' needs key '" + p.key + "'");
        continue;
      }
      spec.params.emplace(p.key, param(*value, path + "." + p.key, p));
    }
    spec.args = entry.parse(spec);
    return spec;
  }

  // One step parameter's raw value, checked against its schema row: type, choices, bounds, and
  // for a placement its syntax.
  StepValue param(const toml::node& value, const std::string& key_path,
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
          fail(value, key_path, "unknown value '" + s + "' (known: " + known + ")");
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

  template <typename Text>
  void check_bounds(const toml::node& value, const std::string& key_path, const ParamSchema& p,
                    double x, Text text) const {
    if (p.bounds.contains(x)) return;
    const std::string range = p.bounds.str();
    const bool interval = range.starts_with("[") || range.starts_with("(");
    fail(value, key_path,
         p.key + " must be " + (range.empty() ? "finite" : (interval ? "in " : "") + range) +
             (p.bounds.note.empty() ? "" : " " + p.bounds.note) + ", got " + text());
  }

  // [stream]: the chunk lengths must be positive and sum to the stream axis' extent in every
  // input and target that has the axis.
  StreamSpec stream(const toml::table& t, const Scenario& s) const {
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
             "chunk lengths sum to " + std::to_string(total) + " but tensor '" + tensor.name +
                 "' " + tensor.shape.str() + " has " + spec.axis + "=" +
                 std::to_string(tensor.shape.extent(spec.axis)));
      }
    }
    if (!streamed) {
      fail(*axis, "stream.axis", "no input or target has an axis '" + spec.axis + "' to stream");
    }
    for (const StepSpec& step : s.steps) {
      if (step.kind == OpKind::mse_loss && step.has("valid_lengths")) {
        throw InputError(located(file_, step.params.at("valid_lengths").loc,
                                 "steps[" + std::to_string(step.index) + "].valid_lengths",
                                 "valid_lengths counts tokens of the whole sequence, which "
                                 "[stream] cuts into chunks; it is not supported with [stream]"));
      }
    }
    return spec;
  }

  // A fault name that exists and changes something this scenario runs: one of its ops, or the
  // training loop.
  Fault fault(const toml::node& node, const std::string& path, const Scenario& s) const {
    const std::string name = string(node, path);
    const std::optional<Fault> fault = find_fault(name);
    if (!fault) {
      const std::vector<std::string> known(std::begin(kFaultNames), std::end(kFaultNames));
      const std::string hint = nearest(name, known);
      fail(node, path,
           "unknown fault '" + name + "'" + (hint.empty() ? "" : " (did you mean '" + hint + "'?)"));
    }
    if (s.has_fault(*fault)) fail(node, path, "fault '" + name + "' is listed twice");
    const FaultInfo& info = fault_catalogue()[static_cast<std::size_t>(*fault)];
    if (info.ops.empty()) {
      if (s.train_steps == 0) {
        fail(node, path, "fault '" + name + "' changes the training loop; it needs train_steps");
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
         "fault '" + name + "' applies to " + ops + ", which this scenario does not use");
  }

  Expectation expect(const toml::table& t) const {
    check_keys(t, "expect", {"verdict", "step", "chunk", "tensor", "op"});
    Expectation e;
    if (const toml::node* v = t.get("verdict")) {
      const std::string verdict = string(*v, "expect.verdict");
      if (verdict != "pass" && verdict != "fail") {
        fail(*v, "expect.verdict", "verdict must be \"pass\" or \"fail\", got '" + verdict + "'");
      }
      e.pass = verdict == "pass";
    }
    for (const char* key : {"step", "chunk"}) {
      if (const toml::node* v = t.get(key)) {
        const std::int64_t n = integer(*v, std::string("expect.") + key);
        if (n < 1) fail(*v, std::string("expect.") + key, "must be >= 1");
        (std::string(key) == "step" ? e.step : e.chunk) = static_cast<int>(n);
      }
    }
    if (const toml::node* v = t.get("tensor")) e.tensor = string(*v, "expect.tensor");
    if (const toml::node* v = t.get("op")) e.op = string(*v, "expect.op");
    if (e.pass && (e.step || e.chunk || e.tensor || e.op)) {
      fail(t, "expect", "a first divergence (step/chunk/tensor/op) needs verdict = \"fail\"");
    }
    return e;
  }

 private:
  const std::string& file_;
};

}  // namespace

Scenario parse_scenario(std::string text, const std::string& file) {
  toml::table root;
  try {
    root = toml::parse(text, file);
  } catch (const toml::parse_error& e) {
    throw InputError(located(file,
                             {static_cast<int>(e.source().begin.line),
                              static_cast<int>(e.source().begin.column)},
                             "", "malformed TOML: " + std::string(e.description())));
  }
  Loader load(file);
  load.check_keys(root, "",
                  {"name", "description", "seed", "precisions", "mesh", "tensors", "steps",
                   "faults", "tolerance", "train_steps", "learning_rate", "expect", "stream"});
  Scenario s;
  s.file = file;
  s.text = std::move(text);
  if (const toml::node* v = root.get("name")) s.name = load.string(*v, "name");
  if (s.name.empty()) {
    const std::size_t slash = file.find_last_of('/');
    s.name = file.substr(slash == std::string::npos ? 0 : slash + 1);
    if (s.name.size() > 5 && s.name.ends_with(".toml")) s.name.resize(s.name.size() - 5);
  }
  if (const toml::node* v = root.get("description")) s.description = load.string(*v, "description");
  if (const toml::node* v = root.get("seed")) {
    const std::int64_t seed = load.integer(*v, "seed");
    if (seed < 0) load.fail(*v, "seed", "seed must be >= 0");
    s.seed = static_cast<std::uint64_t>(seed);
  }
  if (const toml::node* v = root.get("precisions")) {
    const toml::array& list = load.array(*v, "precisions");
    if (list.empty()) load.fail(*v, "precisions", "needs at least one precision");
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string path = "precisions[" + std::to_string(i) + "]";
      const std::string name = load.string(*list.get(i), path);
      s.precisions.push_back(load.wrap(*list.get(i), path, [&] { return parse_precision(name); }));
    }
  } else {
    s.precisions = {parse_precision("f32"), parse_precision("f64"), parse_precision("mp256")};
  }
  const toml::node* mesh = root.get("mesh");
  if (!mesh) throw InputError(located(file, {}, "mesh", "missing required table [mesh]"));
  s.mesh = load.mesh(load.table(*mesh, "mesh"));

  const toml::node* tensors = root.get("tensors");
  if (!tensors) throw InputError(located(file, {}, "tensors", "missing [[tensors]]"));
  std::map<std::string, TensorState> defined;
  const toml::array& tensor_list = load.array(*tensors, "tensors");
  for (std::size_t i = 0; i < tensor_list.size(); ++i) {
    const std::string path = "tensors[" + std::to_string(i) + "]";
    TensorSpec spec = load.tensor(*tensor_list.get(i), path, s.seed);
    if (defined.count(spec.name)) {
      load.fail(*tensor_list.get(i)->as_table()->get("name"), path + ".name",
                "duplicate tensor name '" + spec.name + "'");
    }
    defined[spec.name] = {spec.shape, spec.placement};
    s.tensors.push_back(std::move(spec));
  }

  if (const toml::node* steps = root.get("steps")) {
    const toml::array& step_list = load.array(*steps, "steps");
    StepContext ctx(file, defined);
    for (std::size_t i = 0; i < step_list.size(); ++i) {
      StepSpec spec = load.step(*step_list.get(i), static_cast<int>(i));
      find_op_entry(spec.kind).infer(spec, ctx);
      s.steps.push_back(std::move(spec));
    }
  }
  for (const auto& [name, state] : defined) s.layouts[name] = {state.shape, state.placement};
  if (s.steps.empty()) throw InputError(located(file, {}, "steps", "needs at least one [[steps]]"));
  if (const toml::node* v = root.get("train_steps")) {
    const std::int64_t k = load.integer(*v, "train_steps");
    if (k < 1 || k > 100000) load.fail(*v, "train_steps", "train_steps must be in [1, 100000]");
    s.train_steps = static_cast<int>(k);
    if (s.steps.back().kind != OpKind::mse_loss) {
      load.fail(*v, "train_steps", "training needs a loss: the last step must be op = \"mse_loss\"");
    }
  }
  if (const toml::node* v = root.get("learning_rate")) {
    s.learning_rate = load.number(*v, "learning_rate");
    if (!(s.learning_rate > 0)) load.fail(*v, "learning_rate", "learning_rate must be > 0");
  }

  if (const toml::node* v = root.get("faults")) {
    const toml::array& list = load.array(*v, "faults");
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string path = "faults[" + std::to_string(i) + "]";
      s.faults.push_back(load.fault(*list.get(i), path, s));
    }
  }
  if (const toml::node* v = root.get("tolerance")) {
    for (auto&& [key, node] : load.table(*v, "tolerance")) {
      const std::string name(key.str());
      const std::string path = "tolerance." + name;
      const Precision p = load.wrap(node, path, [&] { return parse_precision(name); });
      const double rtol = load.number(node, path);
      if (!(rtol > 0)) load.fail(node, path, "a tolerance must be > 0");
      s.tolerance[p.name()] = rtol;
    }
  }
  if (const toml::node* v = root.get("expect")) s.expect = load.expect(load.table(*v, "expect"));
  if (const toml::node* v = root.get("stream")) s.stream = load.stream(load.table(*v, "stream"), s);
  for (const StepSpec& step : s.steps) {
    if (const OpEntry& entry = find_op_entry(step.kind); entry.check_plan) {
      entry.check_plan(step, s);
    }
  }
  return s;
}

Scenario load_scenario(const std::string& path) {
  return parse_scenario(read_file(path), path);
}

}  // namespace shardsim
