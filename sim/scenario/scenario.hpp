// The scenario model: a validated, typed view of a TOML scenario file.
//
// The loader knows shapes and placements, not kernels: it checks every key against the op
// schemas below, tracks each tensor's named shape and placement through the steps, and reports
// the first problem as "file:line:col: key.path: message" (an InputError, exit code 2).
// The file format is documented in docs/scenario-format.md.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/fault_list.hpp"
#include "core/magnitude.hpp"
#include "core/mesh.hpp"
#include "core/placement.hpp"
#include "core/rng.hpp"
#include "core/scalar.hpp"
#include "core/shape.hpp"
#include "core/storage.hpp"
#include "ops/op_list.hpp"

namespace shardsim {

struct SourceLoc {
  int line = 0;
  int column = 0;
};

enum class TensorRole { input, parameter, target };
std::string_view role_name(TensorRole role);

struct TensorSpec {
  std::string name;
  Shape shape;
  TensorRole role = TensorRole::input;
  InitSpec init;
  std::uint64_t init_seed = 0;  // from init.seed, else scenario seed ^ fnv1a64(name)
  Layout layout;                // how the sharded program holds it at the start
  SourceLoc loc;
  // dtype = "i64" (token ids, labels): every element, row-major, fixed at load time (drawn by
  // init = { dist = "randint" } or read from an I64/I32 file). Such a tensor is never rounded,
  // never differentiated and never a DistTensor: the ops that read it (cross_entropy's labels)
  // look its values up by global index. Null for a floating tensor.
  std::shared_ptr<const std::vector<std::int64_t>> ids;

  bool is_ids() const { return ids != nullptr; }
};

struct StepValue {
  std::variant<std::int64_t, double, bool, std::string, std::vector<std::int64_t>> value;
  SourceLoc loc;
};

// A step parameter's value as a run uses it: the scenario's value or the op's default;
// std::monostate for an optional key left out (e.g. no bias, plain causal attention).
using ParamValue = std::variant<std::monostate, std::int64_t, double, bool, std::string,
                                std::vector<std::int64_t>>;
struct ResolvedParam {
  std::string key;
  ParamValue value;
};

// One [[steps]] entry. `args` holds its typed parameters (op_list.hpp), parsed and validated
// once by the loader; `params` keeps the raw values with their source locations, for located
// messages and for the runner's liveness bookkeeping (release.hpp).
struct StepSpec {
  int index = 0;
  OpKind kind = OpKind::layer_norm;
  int mesh_dim = 0;  // the mesh dim the step's collectives run on (`mesh_dim`; 0 on a 1-D mesh)
  OpArgs args;
  std::map<std::string, StepValue> params;
  SourceLoc loc;

  std::string_view op() const { return op_name(kind); }
  template <typename Args>
  const Args& as() const {
    return std::get<Args>(args);
  }
  // The name of the tensor the step defines.
  const std::string& output() const;

  // Raw access for the loader's rules. REQUIRES: the key was validated to have this type.
  bool has(const std::string& key) const { return params.count(key) != 0; }
  const std::string& str(const std::string& key) const;
};

struct Expectation {
  bool pass = true;
  std::optional<int> step;
  std::optional<int> chunk;
  std::optional<int> micro;  // the micro-batch (1-based), with micro_batches >= 2
  std::optional<std::string> tensor;
  std::optional<std::string> op;
  SourceLoc loc;                          // the [expect] table
  std::map<std::string, SourceLoc> keys;  // where each given key's value is
};

struct MeshSpec {
  Mesh devices;  // `ranks = N` (one dim, "world") or `dims = { dp = 2, tp = 2 }`
  ReduceOrder reduce_order = ReduceOrder::rank;
  Schedule schedule;

  int ranks() const { return devices.size(); }
};

// Streaming ([stream]): every input and target that has `axis` arrives in consecutive chunks of
// the given lengths (positive, summing to that axis' extent). Each training step runs forward,
// backward and the SGD update once per chunk, in order; boundaries carry the chunk (1-based).
// Parameters are never streamed.
struct StreamSpec {
  std::string axis;
  std::vector<std::int64_t> chunks;
  SourceLoc loc;
};

// The axis micro-batches cut (Scenario::micro_batches).
inline constexpr std::string_view kMicroBatchAxis = "batch";

// The row count of each of k micro-batches of `rows` rows: torch.chunk, c = ceil(rows/k), the
// last may be short. REQUIRES: 1 <= k, and the split gives k non-empty pieces (the loader's
// micro_batches check).
std::vector<std::int64_t> micro_batch_rows(std::int64_t rows, int k);

// Fully sharded data parallelism (`fsdp = { style, dim }`, docs/layouts.md "Fully sharded data
// parallelism"). Every parameter a step names is sharded over the mesh dim `dim` and belongs to
// that step's unit; before the step's forward and again before its backward the unit is
// all-gathered into the layout the step computes with (the parameter's declared placement, which is
// Replicate on `dim`), and released after; after the unit's backward its gradients are
// reduce-scattered back to the shards (a sum: the loss already divides by the global valid-token
// count), and SGD steps the shards only.
//   flat       FSDP1's FlatParameter: the unit's parameters flattened in declaration order into
//              one tensor [flat = N] (N = their total numel, no alignment padding: FSDP1 with
//              use_orig_params=False), padded to k * ceil(N/k) and split evenly: every rank holds
//              ceil(N/k) elements, Shard(flat, padded). REQUIRES: Replicate on every other dim.
//   per_param  FSDP2: each parameter sharded on its first axis, torch.chunk semantics (uneven and
//              empty shards), nested inside any earlier dim that shards that axis.
// Mixed precision (FSDP's MixedPrecision, sim/runner/fsdp_mixed.hpp): param_dtype rounds the
// gathered copy (and the unsharded gradient autograd makes for it), reduce_dtype is the dtype the
// gradient reduce-scatter adds in (each addend and each hop's partial sum rounded to it); the
// master shards and the update stay in the run's precision. None, or a dtype at least as wide as
// the run's precision: the run's own (nothing rounded).
struct FsdpSpec {
  enum class Style { flat, per_param };
  Style style = Style::flat;
  int dim = 0;                            // the mesh dim the parameters are sharded over
  std::optional<Precision> param_dtype;   // bf16, f16, f32 or f64
  std::optional<Precision> reduce_dtype;  // bf16, f16, f32 or f64
  struct Unit {
    int step = 0;                     // index in [[steps]]
    std::string flat_name;            // flat style: "flat_param.OUTPUT", the unit's flat tensor
    std::vector<std::string> params;  // in [[tensors]] declaration order
  };
  std::vector<Unit> units;
  SourceLoc loc;

  // The unit of step `step`, or null when the step names no parameter.
  const Unit* unit_of_step(int step) const;
  // The unit that holds parameter `name`, or null.
  const Unit* unit_of_param(std::string_view name) const;
};
std::string_view fsdp_style_name(FsdpSpec::Style style);

struct Scenario {
  std::string file;  // as given on the command line
  std::string text;  // the full file text (goldens record it)
  std::string name;
  std::string description;
  std::uint64_t seed = 0;
  std::vector<Precision> precisions;
  // bf16 and f16 runs: where kernels accumulate (storage.hpp). `accumulate = "f32"` (default) or
  // "storage"; wider runs ignore it.
  Accumulate accumulate = Accumulate::f32;
  MeshSpec mesh;
  std::vector<TensorSpec> tensors;
  // The i64 tensors of [[tensors]] (TensorSpec::ids), in declaration order; kept apart from
  // `tensors`, whose every entry the runner holds as a floating DistTensor.
  std::vector<TensorSpec> id_tensors;
  std::vector<StepSpec> steps;
  std::vector<Fault> faults;
  // precision name -> rtol override; a Magnitude, since an mp level's rtol can lie below the
  // double range (written as a string in the file, e.g. "2^-2000").
  std::map<std::string, Magnitude> tolerance;
  // Training: 0 runs the steps forward once. K >= 1 runs forward, backward and an SGD update of
  // every parameter K times; the last step must then be a loss.
  int train_steps = 0;
  double learning_rate = 0.1;  // the optimizer's lr (`learning_rate`, or `optimizer.lr`)
  // The parameter update (`optimizer = { kind, lr, betas, eps, weight_decay }`): plain SGD by
  // default, or AdamW as torch.optim.AdamW (ops/adamw.hpp), whose defaults these are.
  struct Optimizer {
    enum class Kind { sgd, adamw } kind = Kind::sgd;
    double beta1 = 0.9;
    double beta2 = 0.999;
    double eps = 1e-8;
    double weight_decay = 1e-2;
  };
  Optimizer optimizer;
  bool adamw() const { return optimizer.kind == Optimizer::Kind::adamw; }
  // Gradient accumulation (docs/layouts.md "Micro-batches and gradient accumulation"): 1 runs
  // the whole batch at once. k >= 2 cuts every input and target on kMicroBatchAxis into k
  // consecutive micro-batches (torch.chunk sizes), run one after another, their parameter
  // gradients summed, one SGD update per training step; the dense oracle still runs the whole
  // batch at once.
  int micro_batches = 1;
  // Gradient-norm clipping before the update (torch.nn.utils.clip_grad_norm_, norm 2): none, or
  // the max norm (> 0).
  std::optional<double> clip_grad_norm;
  std::optional<FsdpSpec> fsdp;  // none: parameters are held as their placements say
  Expectation expect;
  std::optional<StreamSpec> stream;  // none: one chunk holding the whole of every input
  // The global shape and starting placement of every tensor the program defines (inputs and
  // step outputs), as inferred by the loader. Used to estimate memory before anything is
  // allocated.
  struct TensorLayout {
    Shape shape;
    Layout layout;
  };
  std::map<std::string, TensorLayout> tensor_layouts;

  const TensorSpec* find_tensor(std::string_view name) const;
  const TensorSpec* find_ids(std::string_view name) const;  // an i64 tensor, or null
  bool has_fault(Fault fault) const;
  std::vector<std::string> fault_names() const;
  // Relative tolerance for non-exact boundaries at `precision`: the override, or
  // exact_default_rtol.
  Magnitude rtol(const Precision& precision) const;
};

// The default init a program that trusts it assumes for parameter `name` (the ones_init_assumed
// fault): 1 when some step names it as its `weight`, 0 as its `bias`, none otherwise. The first
// step that names it decides.
std::optional<double> assumed_default_init(const Scenario& scenario, const std::string& name);

// default_rtol (scalar.hpp), 2^(16 - bits), without the double's underflow: at mp levels the exact
// power of two at any bits (2^-2032 at mp2048, which as a double is 0 past mp1090), elsewhere
// default_rtol's value.
Magnitude exact_default_rtol(const Precision& precision);

// Scenario files above this size are refused before they are read.
inline constexpr std::uint64_t kMaxScenarioBytes = std::uint64_t{64} << 20;

// Reads and validates a scenario file. Throws InputError with file:line:col and key path.
Scenario load_scenario(const std::string& path);
Scenario parse_scenario(std::string text, const std::string& file);

// Every file a run of `scenario` reads: the scenario file and each input file (init = { file }),
// as read. Commands pass them to check_outputs, so that no output overwrites an input.
std::vector<std::string> input_paths(const Scenario& scenario);

// Checks the names [expect] gives (step, chunk, tensor, op) against a trace of the scenario's
// plan: some boundary must match all of them, or the expectation could never be met. Throws a
// located InputError at the key (suggesting the nearest name) otherwise.
struct TraceEntry;
void check_expectation_names(const Scenario& scenario, const std::vector<TraceEntry>& trace);

// Every key of `step`'s op, in the order `shardsim list` prints them, with the value its run
// uses: defaults filled in, including those taken from the scenario (a dropout's seed and
// stream). The golden manifest records them per boundary.
struct Scenario;
std::vector<ResolvedParam> resolved_params(const StepSpec& step, const Scenario& scenario);

// The vocabulary the loader accepts, for `shardsim list` and for suggestions.
enum class ParamType { tensor, output, string, number, integer, boolean, placement, integer_list };
// The values a number or integer parameter may take: [low, high] with either end open, always
// finite. Written in messages and `list` as e.g. "[0, 1)" or "> 0".
struct ParamBounds {
  double low = -std::numeric_limits<double>::infinity();
  double high = std::numeric_limits<double>::infinity();
  bool low_open = false;
  bool high_open = false;
  std::string note;  // follows the range in a message, e.g. "key (omit it for plain causal)"

  bool contains(double value) const;
  std::string str() const;  // "" when unbounded
};
struct ParamSchema {
  std::string key;
  ParamType type;
  bool required;
  std::string help;
  std::vector<std::string> choices;  // for strings; empty means free-form
  ParamBounds bounds;                // for numbers and integers
};
struct OpSchema {
  OpKind kind;
  std::string name;
  std::string summary;
  std::vector<ParamSchema> params;
};
struct FaultInfo {
  Fault fault;
  std::string name;
  std::string summary;
  // The ops whose plans it changes; empty: the training loop (it needs train_steps).
  std::vector<OpKind> ops;
};
// In OpKind order (op_schemas()[k].kind == OpKind(k)) and Fault order.
const std::vector<OpSchema>& op_schemas();
const std::vector<FaultInfo>& fault_catalogue();

// The candidate closest to `word` by edit distance, or "" when none is plausibly meant.
std::string nearest(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace shardsim
