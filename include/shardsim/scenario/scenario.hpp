// The scenario model: a validated, typed view of a TOML scenario file.
//
// The loader knows shapes and placements, not kernels: it checks every key against the op
// schemas below, tracks each tensor's named shape and placement through the steps, and reports
// the first problem as "file:line:col: key.path: message" (an InputError, exit code 2).
// The file format is documented in README.md ("Scenario format").
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "shardsim/placement.hpp"
#include "shardsim/rng.hpp"
#include "shardsim/scalar.hpp"
#include "shardsim/shape.hpp"
#include "shardsim/mesh.hpp"

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
  Placement placement;          // how the sharded program holds it at the start
  SourceLoc loc;
};

struct StepValue {
  std::variant<std::int64_t, double, bool, std::string, std::vector<std::int64_t>> value;
  SourceLoc loc;
};

struct StepSpec {
  int index = 0;
  std::string op;
  std::map<std::string, StepValue> params;
  SourceLoc loc;

  bool has(const std::string& key) const { return params.count(key) != 0; }
  // REQUIRES: the key was validated to have this type (the loader guarantees it).
  const std::string& str(const std::string& key) const;
  std::string str_or(const std::string& key, const std::string& fallback) const;
  double num_or(const std::string& key, double fallback) const;
  std::int64_t int_or(const std::string& key, std::int64_t fallback) const;
  bool bool_or(const std::string& key, bool fallback) const;
  const std::vector<std::int64_t>& ints(const std::string& key) const;
};

struct Expectation {
  bool pass = true;
  std::optional<int> step;
  std::optional<int> chunk;
  std::optional<std::string> tensor;
  std::optional<std::string> op;
};

struct MeshSpec {
  int ranks = 1;
  ReduceOrder reduce_order = ReduceOrder::rank;
  Schedule schedule;
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

struct Scenario {
  std::string file;  // as given on the command line
  std::string text;  // the full file text (goldens record it)
  std::string name;
  std::string description;
  std::uint64_t seed = 0;
  std::vector<Precision> precisions;
  MeshSpec mesh;
  std::vector<TensorSpec> tensors;
  std::vector<StepSpec> steps;
  std::vector<std::string> faults;
  std::map<std::string, double> tolerance;  // precision name -> rtol override
  // Training: 0 runs the steps forward once. K >= 1 runs forward, backward and an SGD update of
  // every parameter K times; the last step must then be a loss.
  int train_steps = 0;
  double learning_rate = 0.1;
  Expectation expect;
  std::optional<StreamSpec> stream;  // none: one chunk holding the whole of every input
  // The global shape and starting placement of every tensor the program defines (inputs and
  // step outputs), as inferred by the loader. Used to estimate memory before anything is
  // allocated.
  struct Layout {
    Shape shape;
    Placement placement;
  };
  std::map<std::string, Layout> layouts;

  const TensorSpec* find_tensor(std::string_view name) const;
  bool has_fault(std::string_view fault) const;
  // Relative tolerance for non-exact boundaries at `precision` (override or default_rtol).
  double rtol(const Precision& precision) const;
};

// Reads and validates a scenario file. Throws InputError with file:line:col and key path.
Scenario load_scenario(const std::string& path);
Scenario parse_scenario(std::string text, const std::string& file);

// The vocabulary the loader accepts, for `shardsim list` and for suggestions.
enum class ParamType { tensor, output, string, number, integer, boolean, placement, integer_list };
struct ParamSchema {
  std::string key;
  ParamType type;
  bool required;
  std::string help;
  std::vector<std::string> choices;  // for strings; empty means free-form
};
struct OpSchema {
  std::string name;
  std::string summary;
  std::vector<ParamSchema> params;
};
struct FaultInfo {
  std::string name;
  std::string summary;
};
const std::vector<OpSchema>& op_schemas();
const std::vector<FaultInfo>& fault_catalogue();

// The candidate closest to `word` by edit distance, or "" when none is plausibly meant.
std::string nearest(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace shardsim
