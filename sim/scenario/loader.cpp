// Reads a scenario file into the model: the top-level keys and [[tensors]] here; [mesh] and
// placements in loader_mesh.cpp; the steps, [stream], faults and [expect] in loader_steps.cpp.
#include "scenario/loader.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/io.hpp"

namespace shardsim {

// An init parameter: finite and within the f32 range, since inputs are drawn as f32 values at
// every precision (docs/scenario-format.md).
double Loader::init_number(const toml::node& node, const std::string& path) const {
  const double x = number(node, path);
  if (!std::isfinite(x) || std::fabs(x) > std::numeric_limits<float>::max()) {
    fail(node, path,
         "must be finite and within the f32 range (|x| <= 3.4028234663852886e+38; inputs are "
         "drawn as f32 values at every precision), got " +
             format_number(x));
  }
  return x;
}

InitSpec Loader::init(const toml::node& node, const std::string& path, std::uint64_t& seed) const {
  const toml::table& t = table(node, path);
  if (t.get("file")) return init_file(t, path);
  check_keys(t, path, {"dist", "low", "high", "mean", "std", "value", "seed"});
  const toml::node* dist_node = t.get("dist");
  if (!dist_node) {
    fail(node, path,
         "init needs dist = \"uniform\" (keys low, high), \"normal\" (mean, std) "
         "or \"constant\" (value), or a file (keys file, tensor)");
  }
  const std::string dist = string(*dist_node, path + ".dist");
  InitSpec spec;
  std::vector<std::string> keys;  // the parameters this distribution uses
  if (dist == "uniform") {
    spec.dist = InitDist::uniform;
    keys = {"low", "high"};
  } else if (dist == "normal") {
    spec.dist = InitDist::normal;
    keys = {"mean", "std"};
  } else if (dist == "constant") {
    spec.dist = InitDist::constant;
    keys = {"value"};
  } else if (dist == "randint") {
    fail(*dist_node, path + ".dist",
         "dist = \"randint\" draws integers: declare the tensor dtype = \"i64\"");
  } else {
    fail(*dist_node, path + ".dist",
         "unknown distribution " + quote(dist) + " (known: uniform, normal, constant)");
  }
  for (auto&& [key, value] : t) {
    const std::string name(key.str());
    if (name == "dist" || name == "seed" || std::find(keys.begin(), keys.end(), name) != keys.end())
      continue;
    fail(value, path + "." + name,
         "dist = \"" + dist + "\" does not use " + quote(name) + " (its keys: " + keys.front() +
             (keys.size() > 1 ? ", " + keys.back() : "") + ")");
  }
  if (auto* v = t.get("low")) spec.low = init_number(*v, path + ".low");
  if (auto* v = t.get("high")) spec.high = init_number(*v, path + ".high");
  if (auto* v = t.get("mean")) spec.mean = init_number(*v, path + ".mean");
  if (auto* v = t.get("std")) spec.stddev = init_number(*v, path + ".std");
  if (auto* v = t.get("value")) spec.value = init_number(*v, path + ".value");
  if (spec.dist == InitDist::constant && !t.get("value"))
    fail(node, path, "dist = \"constant\" needs value");
  if (auto* v = t.get("seed")) {
    const std::int64_t s = integer(*v, path + ".seed");
    if (s < 0) fail(*v, path + ".seed", "seed must be >= 0");
    seed = static_cast<std::uint64_t>(s);
  }
  if (spec.dist == InitDist::uniform && !(spec.low < spec.high)) {
    fail(node, path, "uniform init needs low < high");
  }
  // Box-Muller's |z| stays below sqrt(2 * 24 ln 2) < 6, so mean + std z stays a finite float.
  if (spec.dist == InitDist::normal &&
      !(spec.stddev > 0 &&
        std::fabs(spec.mean) + 6 * spec.stddev <= std::numeric_limits<float>::max())) {
    fail(node, path, "normal init needs std > 0 and |mean| + 6 std within the f32 range");
  }
  return spec;
}

TensorSpec Loader::tensor(const toml::node& node, const std::string& path,
                          std::uint64_t scenario_seed, const Mesh& mesh) {
  const toml::table& t = table(node, path);
  check_keys(t, path, {"name", "axes", "shape", "role", "init", "placement", "dtype"});
  TensorSpec spec;
  spec.loc = loc_of(node);
  for (const char* key : {"name", "axes", "shape"}) {
    if (!t.get(key)) fail(node, path, std::string("missing required key '") + key + "'");
  }
  spec.name = string(*t.get("name"), path + ".name");
  if (const std::string problem = tensor_name_problem(spec.name); !problem.empty()) {
    fail(*t.get("name"), path + ".name", problem);
  }
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
    if (!is_axis_name(axis)) {
      fail(*axes.get(i), axis_path,
           "axis name " + quote(axis) +
               " must be non-empty and use only letters, digits and '_' "
               "(placements write Shard(AXIS), goldens AXIS=BEGIN:END)");
    }
    const std::int64_t extent = integer(*shape.get(i), extent_path);
    if (extent <= 0) {
      fail(*shape.get(i), extent_path,
           "size of axis " + quote(axis) + " must be positive, got " + std::to_string(extent));
    }
    for (const Axis& seen : named) {
      if (seen.name == axis) fail(*axes.get(i), axis_path, "duplicate axis " + quote(axis));
    }
    named.push_back({axis, extent});
    extents.push_back(extent);
  }
  if (!checked_numel(extents)) {
    fail(*t.get("shape"), path + ".shape",
         "element count of " + Shape(named).str() + " overflows a 64-bit integer");
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
      fail(*role, path + ".role",
           "unknown role " + quote(r) + " (known: input, parameter, target)");
    }
  }
  spec.init_seed = scenario_seed ^ fnv1a64(spec.name);
  if (const toml::node* dtype = t.get("dtype")) {
    ids_dtype(t, *dtype, node, path, spec);
  } else if (const toml::node* init_node = t.get("init")) {
    spec.init = init(*init_node, path + ".init", spec.init_seed);
    if (spec.init.dist == InitDist::file) check_init_file_shape(*init_node, path + ".init", spec);
  }
  spec.layout = Layout::uniform(mesh.ndim(), Placement::replicate());
  if (const toml::node* placement = t.get("placement")) {
    spec.layout = layout(*placement, path + ".placement", mesh, spec.shape);
  }
  return spec;
}

// Whether a terminal would act on some character of `text` (what escaped() escapes: C0, DEL,
// C1, the bidirectional overrides and isolates): a scenario's name is printed to the terminal as
// it is ("NAME: pass"), where one could move the cursor, change colours or reorder the line.
static bool has_control_character(std::string_view text) { return escaped(text) != text; }

// name, description, seed, accumulate, precisions.
void Loader::header(const toml::table& root, Scenario& s) const {
  if (const toml::node* v = root.get("name")) {
    s.name = string(*v, "name");
    if (has_control_character(s.name)) {
      fail(*v, "name",
           "the name " + quote(s.name) +
               " holds a control character (or a bidirectional override, which reorders the line)");
    }
    if (s.name.empty()) fail(*v, "name", "the name is empty (without `name`, the file's name)");
  }
  if (s.name.empty()) {
    const std::size_t slash = s.file.find_last_of('/');
    s.name = s.file.substr(slash == std::string::npos ? 0 : slash + 1);
    if (s.name.size() > 5 && s.name.ends_with(".toml")) s.name.resize(s.name.size() - 5);
    if (has_control_character(s.name)) {
      throw InputError(quote(s.file) +
                       ": the file name, the scenario's name when it gives none, holds a "
                       "control character; give the scenario a `name`");
    }
  }
  if (const toml::node* v = root.get("description")) s.description = string(*v, "description");
  if (const toml::node* v = root.get("seed")) {
    const std::int64_t seed = integer(*v, "seed");
    if (seed < 0) fail(*v, "seed", "seed must be >= 0");
    s.seed = static_cast<std::uint64_t>(seed);
  }
  if (const toml::node* a = root.get("accumulate")) {
    const std::string text = string(*a, "accumulate");
    const std::optional<Accumulate> accumulate = parse_accumulate(text);
    if (!accumulate) {
      fail(*a, "accumulate",
           "expected \"f32\" (bf16/f16 kernels accumulate in f32, the default) or \"storage\" "
           "(they accumulate in the narrow format), got " +
               quote(text));
    }
    s.accumulate = *accumulate;
  }
  const toml::node* v = root.get("precisions");
  if (!v) {
    s.precisions = {parse_precision("f32"), parse_precision("f64"), parse_precision("mp256")};
    return;
  }
  const toml::array& list = array(*v, "precisions");
  if (list.empty()) fail(*v, "precisions", "needs at least one precision");
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string path = "precisions[" + std::to_string(i) + "]";
    const std::string name = string(*list.get(i), path);
    const Precision precision = wrap(*list.get(i), path, [&] { return parse_precision(name); });
    if (std::find(s.precisions.begin(), s.precisions.end(), precision) != s.precisions.end()) {
      fail(*list.get(i), path, "precision " + quote(precision.name()) + " is listed twice");
    }
    s.precisions.push_back(precision);
  }
}

// [[tensors]], each a fresh name; `defined` receives their shapes and placements.
void Loader::tensors(const toml::table& root, Scenario& s,
                     std::map<std::string, TensorState>& defined) {
  const toml::node* tensors = root.get("tensors");
  if (!tensors) throw LocatedError(located(file_, {}, "tensors", "missing [[tensors]]"));
  const toml::array& list = array(*tensors, "tensors");
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string path = "tensors[" + std::to_string(i) + "]";
    TensorSpec spec = tensor(*list.get(i), path, s.seed, s.mesh.devices);
    if (defined.count(spec.name)) {
      fail(*list.get(i)->as_table()->get("name"), path + ".name",
           "duplicate tensor name " + quote(spec.name));
    }
    if (const std::string clash = tensor_name_clash(spec.name, defined); !clash.empty()) {
      fail(*list.get(i)->as_table()->get("name"), path + ".name", clash);
    }
    defined[spec.name] = {spec.shape, spec.layout, spec.ids};
    (spec.is_ids() ? s.id_tensors : s.tensors).push_back(std::move(spec));
  }
}

// [[steps]] in order, each checked by its op's rules against the tensors defined before it.
void Loader::steps(const toml::table& root, Scenario& s,
                   std::map<std::string, TensorState>& defined) const {
  if (const toml::node* steps = root.get("steps")) {
    const toml::array& list = array(*steps, "steps");
    StepContext ctx(file_, defined);
    ctx.mesh = &s.mesh.devices;
    for (std::size_t i = 0; i < list.size(); ++i) {
      StepSpec spec = step(*list.get(i), static_cast<int>(i), s.mesh.devices);
      find_op_entry(spec.kind).infer(spec, ctx);
      s.steps.push_back(std::move(spec));
    }
  }
  for (const auto& [name, state] : defined) s.tensor_layouts[name] = {state.shape, state.layout};
  if (s.steps.empty())
    throw LocatedError(located(file_, {}, "steps", "needs at least one [[steps]]"));
}

// One [tolerance] value: a number, or for an rtol below the double range (an mp level's) a string
// "2^E" or "1e-700" (Magnitude::parse). In (0, 1) either way; a float literal that TOML read as
// 0 is refused with that explanation rather than taken as 0.
Magnitude Loader::tolerance_value(const toml::node& node, const std::string& path) const {
  const std::string range =
      "a tolerance must be in (0, 1) (a normwise rtol of 1 accepts any value no larger than the "
      "oracle's largest), got ";
  if (node.is_string()) {
    const std::string text = *node.value<std::string>();
    const std::optional<Magnitude> rtol = Magnitude::parse(text);
    if (!rtol) {
      fail(node, path,
           "expected a number or a string such as \"2^-2000\" or \"1e-700\", got " + quote(text));
    }
    if (rtol->is_zero() || !(*rtol < Magnitude::of(1.0))) fail(node, path, range + quote(text));
    return *rtol;
  }
  const double rtol = number(node, path);
  if (rtol == 0 && node.is_floating_point()) {
    fail(node, path,
         range +
             "0 (if the literal was below the double range, such as 1e-700, it reads as 0: "
             "write such a tolerance as a string, e.g. \"2^-2000\" or \"1e-700\")");
  }
  if (!(rtol > 0 && rtol < 1)) fail(node, path, range + format_number(rtol));
  return Magnitude::of(rtol);
}

// train_steps, learning_rate and [tolerance].
void Loader::training(const toml::table& root, Scenario& s) const {
  if (const toml::node* v = root.get("train_steps")) {
    const std::int64_t k = integer(*v, "train_steps");
    if (k < 1 || k > 100000) fail(*v, "train_steps", "train_steps must be in [1, 100000]");
    s.train_steps = static_cast<int>(k);
    if (!is_loss(s.steps.back().kind)) {
      fail(*v, "train_steps",
           "training needs a loss: the last step must be op = \"mse_loss\" or "
           "\"cross_entropy\"");
    }
  }
  if (const toml::node* v = root.get("learning_rate")) {
    s.learning_rate = number(*v, "learning_rate");
    if (!(s.learning_rate > 0) || !(s.learning_rate <= std::numeric_limits<float>::max())) {
      fail(
          *v, "learning_rate",
          "learning_rate must be > 0 and within the f32 range (f32 runs use float(learning_rate)), "
          "got " +
              format_number(s.learning_rate));
    }
    // Nothing would read it: refused rather than ignored (as clip_grad_norm is).
    if (s.train_steps == 0) fail(*v, "learning_rate", "a learning rate needs train_steps");
  }
  if (const toml::node* v = root.get("tolerance")) {
    for (auto&& [key, node] : table(*v, "tolerance")) {
      const std::string name(key.str());
      const std::string path = "tolerance." + name;
      const Precision p = wrap(node, path, [&] { return parse_precision(name); });
      // Two spellings of one precision ("mp256" and "mp0256") would leave one of them unread.
      if (s.tolerance.count(p.name())) {
        fail(node, path, "the tolerance of " + p.name() + " is given twice");
      }
      s.tolerance[p.name()] = tolerance_value(node, path);
    }
  }
}

Scenario parse_scenario(std::string text, const std::string& file) {
  toml::table root;
  try {
    root = toml::parse(text, file);
  } catch (const toml::parse_error& e) {
    throw LocatedError(located(
        file, {static_cast<int>(e.source().begin.line), static_cast<int>(e.source().begin.column)},
        "", "malformed TOML: " + std::string(e.description())));
  }
  Loader load(file);
  load.check_keys(root, "",
                  {"name", "description", "seed", "precisions", "mesh", "tensors", "steps",
                   "faults", "tolerance", "train_steps", "learning_rate", "expect", "stream",
                   "accumulate", "clip_grad_norm", "fsdp", "micro_batches", "optimizer",
                   "blocks"});
  NodeOrigins origins;
  load.expand_blocks(root, origins);
  // loc_of reads the copies' positions from `origins` while this parse runs.
  struct Origins {
    explicit Origins(const NodeOrigins* map) { node_origins = map; }
    ~Origins() { node_origins = nullptr; }
    Origins(const Origins&) = delete;
    Origins& operator=(const Origins&) = delete;
  } in_scope(&origins);
  Scenario s;
  s.file = file;
  s.text = std::move(text);
  load.header(root, s);
  const toml::node* mesh = root.get("mesh");
  if (!mesh) throw LocatedError(located(file, {}, "mesh", "missing required table [mesh]"));
  s.mesh = load.mesh(load.table(*mesh, "mesh"));
  std::map<std::string, TensorState> defined;
  load.tensors(root, s, defined);
  load.steps(root, s, defined);
  load.training(root, s);
  load.optimizer(root, s);
  load.micro_batches(root, s);
  load.fsdp(root, s);
  if (const toml::node* v = root.get("faults")) {
    const toml::array& list = load.array(*v, "faults");
    for (std::size_t i = 0; i < list.size(); ++i) {
      s.faults.push_back(load.fault(*list.get(i), "faults[" + std::to_string(i) + "]", s));
    }
  }
  if (const toml::node* v = root.get("stream")) s.stream = load.stream(load.table(*v, "stream"), s);
  if (const toml::node* v = root.get("expect")) s.expect = load.expect(load.table(*v, "expect"), s);
  for (const StepSpec& step : s.steps) {
    if (const OpEntry& entry = find_op_entry(step.kind); entry.check_plan) {
      entry.check_plan(step, s);
    }
  }
  // After the plan checks, which refuse a fault a step's mode cannot express at all.
  if (const toml::node* v = root.get("faults")) load.fault_plans(load.array(*v, "faults"), s);
  return s;
}

Scenario load_scenario(const std::string& path) {
  return parse_scenario(read_file(path, kMaxScenarioBytes), path);
}

}  // namespace shardsim
