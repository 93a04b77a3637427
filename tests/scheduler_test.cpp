// Determinism under the scheduler (invariant 4 in docs/architecture.md), on 1-D and N-D meshes: the
// order in which local phases visit ranks must not change any value, metric or trace, and the
// CLI's report is byte-identical across runs.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "compare/compare.hpp"
#include "report/report.hpp"
#include "scenario/scenario.hpp"
#include "core/world.hpp"

namespace fs = std::filesystem;

namespace {

const std::vector<std::string> kSchedules = {"rank", "reverse", "shuffle:7", "shuffle:12345"};

std::string scenario_path(const std::string& name) {
  return std::string(SHARDSIM_SOURCE_DIR) + "/scenarios/" + name;
}

// The JSON report of `scenario` at all its precisions under `schedule`.
std::string report_under(const shardsim::Scenario& scenario, const std::string& schedule) {
  shardsim::RunOptions options;
  options.schedule = shardsim::parse_schedule(schedule);
  std::vector<shardsim::RunReport> reports;
  for (const shardsim::Precision& precision : scenario.precisions) {
    reports.push_back(shardsim::evaluate(scenario, precision, options));
  }
  return shardsim::report_json(scenario, reports, shardsim::judge(scenario, reports));
}

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

TEST_CASE("the schedules under test visit the ranks in different orders", "[scheduler]") {
  // Otherwise the determinism test below would be vacuous.
  std::vector<std::vector<int>> orders;
  for (const std::string& schedule : kSchedules) {
    orders.push_back(shardsim::schedule_order(shardsim::parse_schedule(schedule), 4));
  }
  for (std::size_t a = 0; a < orders.size(); ++a) {
    for (std::size_t b = a + 1; b < orders.size(); ++b) {
      INFO(kSchedules[a] << " vs " << kSchedules[b]);
      CHECK(orders[a] != orders[b]);
    }
  }
}

TEST_CASE("reports are byte-identical under every schedule except for the schedule field",
          "[scheduler]") {
  const char* scenario_name = GENERATE(
      "layernorm_sequence_sharded.toml", "layernorm_padded.toml", "layernorm_redistribute.toml",
      // N-D meshes: dp x tp, cp x tp, dp x cp x tp; the
      // zigzag ring on cp ships blocks and dK/dV by send/recv.
      "mesh_dp_tp_mlp_sequence_parallel.toml", "mesh_cp_tp_block.toml",
      "mesh_dp_cp_tp_training.toml", "mesh_cp_tp_zigzag_training.toml",
      // gradient accumulation over 2 micro-batches on dp x tp
      "micro_batches_dp_tp_mlp.toml",
      // FSDP: flat units, and per_param under tp x dp;
      // mixed precision (hop-rounded reduce-scatters).
      "fsdp_flat_mlp.toml", "mesh_tp_dp_fsdp_mlp.toml", "fsdp_mixed_bf16_mlp.toml");
  INFO(scenario_name);
  const shardsim::Scenario scenario = shardsim::load_scenario(scenario_path(scenario_name));
  std::string reference;
  for (const std::string& schedule : kSchedules) {
    INFO("schedule " << schedule);
    nlohmann::ordered_json report = nlohmann::ordered_json::parse(report_under(scenario, schedule));
    REQUIRE(report["runs"].size() == scenario.precisions.size());
    for (auto& run : report["runs"]) {
      // The field is really there and really says which schedule ran.
      CHECK(run["schedule"] == schedule);
      CHECK(run["verdict"] == "pass");
      REQUIRE(run["boundaries"].size() > 0);
      run.erase("schedule");
    }
    const std::string stripped = report.dump(2);
    if (reference.empty()) {
      reference = stripped;
    } else {
      CHECK(stripped == reference);
    }
  }
}

TEST_CASE("the CLI writes byte-identical reports on repeated runs", "[scheduler][cli]") {
  // ctest runs each test case in its own process, so the pid makes the directory unique.
  const fs::path dir =
      fs::temp_directory_path() / ("shardsim_scheduler_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string scenario = scenario_path("layernorm_sequence_sharded.toml");
  std::vector<std::string> reports;
  for (const char* name : {"first.json", "second.json"}) {
    const std::string command = std::string("'") + SHARDSIM_BINARY + "' run --quiet '" + scenario +
                                "' --report '" + (dir / name).string() + "' > /dev/null";
    const int status = std::system(command.c_str());
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    reports.push_back(slurp(dir / name));
  }
  fs::remove_all(dir);
  REQUIRE_FALSE(reports[0].empty());
  CHECK(reports[0] == reports[1]);
  // Not trivially equal: the report carries the per-boundary metrics of three precisions.
  CHECK(reports[0].find("\"mp256\"") != std::string::npos);
}
