// The boundary contract (trace.hpp, BoundaryLabel): every boundary finds the oracle tensor it
// names, or declares it has none; an exactness claim without an oracle tensor is an internal
// error, never a silent "unchecked".
#include "runner/boundary_contract.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>

#include "compare/compare.hpp"
#include "core/world-inl.hpp"
#include "ops/layer_norm/layer_norm_plan.hpp"
#include "scenario/loader_internal.hpp"
#include "scenario/scenario.hpp"

using namespace shardsim;
namespace fs = std::filesystem;

namespace {

std::vector<fs::path> bundled_scenarios() {
  std::vector<fs::path> all;
  for (const auto& e :
       fs::recursive_directory_iterator(fs::path(SHARDSIM_SOURCE_DIR) / "scenarios")) {
    if (e.path().extension() == ".toml") all.push_back(e.path());
  }
  std::sort(all.begin(), all.end());
  return all;
}

// Whether a boundary's tensor name is the scenario's own or one the loader keeps scenarios from
// taking (names.cpp): grad(NAME), NAME@WHERE, the runner's own names, or OWNER.PART for a
// scenario tensor OWNER and a PART of is_runner_part's list.
bool scenario_or_reserved(const std::string& name, const Scenario& scenario) {
  if (scenario.tensor_layouts.count(name)) return true;
  if (name.find_first_of("(@") != std::string::npos || is_runner_name(name)) return true;
  return !runner_part_owner(name, [&](std::string_view owner) {
            return scenario.tensor_layouts.count(std::string(owner)) != 0;
          }).empty();
}

TraceEntry entry_of(const BoundaryLabel& label) {
  TraceEntry entry;
  entry.id = 7;
  entry.op = label.op;
  entry.tensor = label.tensor;
  return entry;
}

}  // namespace

TEST_CASE(
    "no bundled scenario has an exact-claimed boundary without its oracle tensor, or a "
    "boundary name a scenario could take",
    "[contract]") {
  const std::vector<fs::path> scenarios = bundled_scenarios();
  REQUIRE(scenarios.size() >= 10);
  for (const fs::path& path : scenarios) {
    INFO("scenario " << path.string());
    const Scenario scenario = load_scenario(path.string());
    RunReport report;
    REQUIRE_NOTHROW(report = evaluate(scenario, parse_precision("f64")));
    for (const BoundaryResult& b : report.boundaries) {
      INFO("boundary #" << b.entry.id << " " << b.entry.op << " -> " << b.entry.tensor);
      // The runner keeps a claim only while the inputs matched; either way an unchecked
      // boundary must not claim anything.
      CHECK_FALSE((b.entry.exact && b.status == Status::unchecked));
      // Every name a boundary records is one the loader refuses to scenarios unless it is their
      // own, so no scenario tensor can collide with it (a part missing from is_runner_part's list
      // fails here).
      CHECK(scenario_or_reserved(b.entry.tensor, scenario));
      CHECK(scenario_or_reserved(b.entry.dense, scenario));
    }
  }
}

TEST_CASE("find_oracle: the named tensor, none by declaration, or an internal error",
          "[contract]") {
  std::map<std::string, Tensor<double>> dense;
  dense.emplace("y.mean", Tensor<double>(Shape({{"row", 2}})));
  const BoundaryLabel named{.op = "layer_norm", .tensor = "y.mean", .exact = true};
  CHECK(find_oracle(named, entry_of(named), dense) == &dense.at("y.mean"));

  const BoundaryLabel misspelt{.op = "layer_norm", .tensor = "y.maen", .exact = false};
  CHECK_THROWS_AS(find_oracle(misspelt, entry_of(misspelt), dense), InternalError);

  const BoundaryLabel declared_none{.op = "all_gather", .tensor = "y.moments", .has_oracle = false};
  CHECK(find_oracle(declared_none, entry_of(declared_none), dense) == nullptr);

  const BoundaryLabel exact_without{
      .op = "all_gather", .tensor = "y.moments", .exact = true, .has_oracle = false};
  CHECK_THROWS_WITH(find_oracle(exact_without, entry_of(exact_without), dense),
                    Catch::Contains("claims exactness but has no oracle tensor"));
}

TEST_CASE("a plan whose oracle was stored under a misspelt name fails, it is never unchecked",
          "[contract]") {
  // The sequence-sharded LayerNorm plan records y, y.mean and y.rstd. The "step" below stores
  // the oracle's statistics under "y.maen": the first boundary that names y.mean must throw.
  const Shape shape({{"seq", 4}, {"hidden", 3}});
  Tensor<double> x(shape);
  for (std::int64_t i = 0; i < x.numel(); ++i) x[i] = 0.25 * static_cast<double>(i % 5) - 0.5;
  std::map<std::string, Tensor<double>> dense;
  LayerNormParams params;
  LayerNormSaved<double> saved;
  Tensor<double> y;
  layer_norm_forward<double>(x, nullptr, nullptr, params, y, saved);
  dense["y"] = y;
  dense["y.maen"] = saved.mean;  // the deliberate misspelling
  dense["y.rstd"] = saved.rstd;

  World<double> world(2, ReduceOrder::rank, Schedule{});
  std::vector<std::string> checked;
  world.set_hook([&](const BoundaryLabel& label, const DistTensor<double>&) {
    TraceEntry entry = entry_of(label);
    find_oracle(label, entry, dense);
    checked.push_back(label.tensor);
    return true;
  });
  const DistTensor<double> sx = distribute("x", x, Placement::shard("seq"), 2);
  LayerNormShardedSaved<double> sharded_saved;
  CHECK_THROWS_WITH(layer_norm_row_sharded<double>(world, sx, nullptr, nullptr, params, "y",
                                                   sharded_saved, LayerNormFaults{}),
                    Catch::Contains("'y.mean', which no step stored"));

  // With the name spelt right, every boundary of the plan finds its oracle.
  dense["y.mean"] = saved.mean;
  checked.clear();
  REQUIRE_NOTHROW(layer_norm_row_sharded<double>(world, sx, nullptr, nullptr, params, "y",
                                                 sharded_saved, LayerNormFaults{}));
  CHECK(std::find(checked.begin(), checked.end(), "y.mean") != checked.end());
}
