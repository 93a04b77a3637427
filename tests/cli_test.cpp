// End-to-end tests of the shardsim CLI: exit codes, located error messages, no partial output
// files, and the report/explain/validate/list outputs.
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

#include "cli_test_support.hpp"

// The child-process runner, scratch directories and slurp come from cli_test_support.hpp.
using cli_test::CliResult;
using cli_test::run_cli;
using cli_test::slurp;
using cli_test::TempDir;
namespace fs = std::filesystem;

namespace {

std::string shell_quoted(const fs::path& path) { return cli_test::q(path); }

std::string source_scenario(const std::string& name) {
  return std::string(SHARDSIM_SOURCE_DIR) + "/scenarios/" + name;
}

// The tiny valid scenario of cli_test_support.hpp (its line numbers are in the messages).
const std::string& kValid = cli_test::kTiny;

// kValid with the first occurrence of `from` replaced by `to`.
std::string edited(const std::string& from, const std::string& to) {
  return cli_test::replaced(kValid, from, to);
}

// Runs `shardsim run` on `text` with --report, and checks the bad-input contract: exit code 2,
// one message on stderr that starts with the located prefix "FILE:LINE:COL: KEY.PATH:" and
// contains `what`, nothing on stdout, and no report (or temporary) file left behind.
void expect_located_error(const std::string& text, const std::string& location,
                          const std::string& what, const std::string& extra_args = "") {
  TempDir dir;
  const fs::path scenario = dir.write("scenario.toml", text);
  const CliResult r = run_cli("run " + shell_quoted(scenario) + " --report " +
                              shell_quoted(dir.path() / "report.json") + " " + extra_args);
  INFO("stderr: " << r.err);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("shardsim: error: " + scenario.string() + ":" + location + ": ") == 0);
  CHECK(r.err.find(what) != std::string::npos);
  CHECK(r.out.empty());
  CHECK(cli_test::entries(dir.path()) == std::vector<std::string>{"scenario.toml"});
}

}  // namespace

TEST_CASE("cli: the tiny scenario used by the error tests is itself valid", "[cli]") {
  TempDir dir;
  const CliResult r = run_cli("run --quiet " + shell_quoted(dir.write("scenario.toml", kValid)));
  INFO(r.err);
  CHECK(r.exit_code == 0);
}

TEST_CASE("cli: bad scenario input exits 2 with a located message and no report", "[cli]") {
  SECTION("(a) malformed TOML") {
    expect_located_error(edited("ranks = 2", "ranks = = 2"), "5:9", "malformed TOML");
  }
  SECTION("(b) unknown op, with a suggestion") {
    expect_located_error(edited("\"layer_norm\"", "\"layer_nrom\""), "14:6: steps[0].op",
                         "unknown op 'layer_nrom' (did you mean 'layer_norm'?)");
  }
  SECTION("(c) ranks = 0") {
    expect_located_error(edited("ranks = 2", "ranks = 0"), "5:9: mesh.ranks",
                         "ranks must be in [1, 4096], got 0");
  }
  SECTION("(d) an unknown axis in a placement") {
    expect_located_error(edited("Shard(seq)", "Shard(sequence)"), "11:13: tensors[0].placement",
                         "unknown axis 'sequence'");
  }
  SECTION("(e) a non-positive size") {
    expect_located_error(edited("[2, 5, 4]", "[2, 0, 4]"), "10:13: tensors[0].shape[1]",
                         "size of axis 'seq' must be positive, got 0");
  }
  SECTION("(f) an unknown top-level key, with a suggestion") {
    expect_located_error(edited("precisions =", "precision ="), "2:1: precision",
                         "unknown key 'precision' (did you mean 'precisions'?)");
  }
  SECTION("(g) a duplicate tensor name") {
    expect_located_error(edited("[[steps]]",
                                "[[tensors]]\nname = \"x\"\naxes = [\"hidden\"]\n"
                                "shape = [4]\n\n[[steps]]"),
                         "14:8: tensors[1].name", "duplicate tensor name 'x'");
  }
  SECTION("(h) a tensor used before it is defined") {
    expect_located_error(edited("input = \"x\"", "input = \"xx\""), "15:9: steps[0].input",
                         "tensor 'xx' is used before it is defined (did you mean 'x'?)");
  }
  SECTION("(i) precision mp7 in the file") {
    expect_located_error(edited("[\"f64\"]", "[\"mp7\"]"), "2:15: precisions[0]",
                         "invalid precision 'mp7'");
  }
}

TEST_CASE("cli: bad command-line usage exits 2 and writes nothing", "[cli]") {
  TempDir dir;
  const fs::path scenario = dir.write("scenario.toml", kValid);
  const std::string report = " --report " + shell_quoted(dir.path() / "report.json");
  SECTION("(i) precision mp7 on --precision") {
    const CliResult r = run_cli("run " + shell_quoted(scenario) + " --precision f64,mp7" + report);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("invalid precision 'mp7'") != std::string::npos);
  }
  SECTION("(j) an unknown flag") {
    const CliResult r = run_cli("run " + shell_quoted(scenario) + " --frobnicate" + report);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("frobnicate") != std::string::npos);
  }
  SECTION("(k) a missing scenario file") {
    const fs::path missing = dir.path() / "nope.toml";
    const CliResult r = run_cli("run " + shell_quoted(missing) + report);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(missing.string() + ": cannot open") != std::string::npos);
  }
  SECTION("(l) --report into a directory that does not exist") {
    const fs::path target = dir.path() / "no_such_dir" / "report.json";
    const CliResult r =
        run_cli("run --quiet " + shell_quoted(scenario) + " --report " + shell_quoted(target));
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("does not exist") != std::string::npos);
    CHECK_FALSE(fs::exists(target.parent_path()));
  }
  SECTION("(m) an extra positional argument, named (issue 51)") {
    const CliResult r = run_cli("run " + shell_quoted(scenario) + " extra" + report);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("unexpected argument 'extra': this command takes 1 positional argument") !=
          std::string::npos);
    const CliResult c = run_cli("compare a b more");
    CHECK(c.exit_code == 2);
    CHECK(c.err.find("unexpected argument 'more': this command takes 2 positional arguments") !=
          std::string::npos);
  }
  SECTION("no command, and an unknown command") {
    CHECK(run_cli("").exit_code == 2);
    const CliResult r = run_cli("frobnicate");
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("unknown command 'frobnicate'") != std::string::npos);
  }
  // One message, on stderr only, and never a partial report.
  CHECK(cli_test::entries(dir.path()) == std::vector<std::string>{"scenario.toml"});
}

TEST_CASE("cli: an unmet expectation exits 1 and still writes the report", "[cli]") {
  TempDir dir;
  // The scenario passes, but says it must fail: "an expected divergence that did not happen".
  const fs::path scenario = dir.write("scenario.toml", kValid + "\n[expect]\nverdict = \"fail\"\n");
  const CliResult r = run_cli("run --quiet " + shell_quoted(scenario) + " --report " +
                              shell_quoted(dir.path() / "r.json"));
  CHECK(r.exit_code == 1);
  CHECK(r.out.find("UNEXPECTED") != std::string::npos);
  const auto report = nlohmann::json::parse(slurp(dir.path() / "r.json"));
  CHECK(report["verdict"] == "pass");
  CHECK(report["matches_expectation"] == false);
}

TEST_CASE("cli: run writes a JSON report with the documented keys", "[cli]") {
  TempDir dir;
  const fs::path report_path = dir.path() / "R.json";
  const CliResult r =
      run_cli("run " + shell_quoted(source_scenario("layernorm_sequence_sharded.toml")) +
              " --report " + shell_quoted(report_path));
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.err.empty());
  const auto report = nlohmann::json::parse(slurp(report_path));
  for (const char* key : {"scenario", "verdict", "first_divergence", "runs"}) {
    CHECK(report.contains(key));
  }
  CHECK(report["scenario"] == "layernorm_sequence_sharded");
  CHECK(report["verdict"] == "pass");
  CHECK(report["first_divergence"].is_null());
  REQUIRE(report["runs"].size() == 3);  // f32, f64, mp256
  for (const auto& run : report["runs"]) {
    REQUIRE(run["boundaries"].size() == 6);  // 3 inputs, then y.mean, y.rstd, y
    for (const auto& b : run["boundaries"]) {
      for (const char* key : {"id", "step", "chunk", "op", "tensor", "global_shape", "placement",
                              "ranks", "max_abs", "max_rel", "max_ulp", "status"}) {
        INFO("key " << key);
        CHECK(b.contains(key));
      }
      CHECK(b["status"] == "exact");
    }
    // The last boundary is y: Shard(seq), rank 3 owns seq[12:13).
    const auto& y = run["boundaries"][5];
    CHECK(y["tensor"] == "y");
    CHECK(y["placement"] == "Shard(seq)");
    CHECK(y["global_shape"] == nlohmann::json{{"batch", 2}, {"seq", 13}, {"hidden", 16}});
    CHECK(y["ranks"][3]["local_shape"]["seq"] == 1);
    CHECK(y["ranks"][3]["offset"]["seq"] == 12);
  }
}

TEST_CASE("cli: explain, validate and list", "[cli]") {
  const std::string scenario = "'" + source_scenario("layernorm_sequence_sharded.toml") + "'";
  const CliResult explain = run_cli("explain " + scenario);
  CHECK(explain.exit_code == 0);
  CHECK(explain.out.find("rank 3: local [batch=2, seq=1, hidden=16] seq[12:13)") !=
        std::string::npos);
  CHECK(explain.out.find("rank 0: local [batch=2, seq=4, hidden=16] seq[0:4)") !=
        std::string::npos);
  const CliResult padded = run_cli("explain '" + source_scenario("layernorm_padded.toml") + "'");
  CHECK(padded.out.find("rank 3: local [batch=2, seq=4, hidden=16] seq[12:13)+3pad") !=
        std::string::npos);

  const CliResult validate = run_cli("validate " + scenario);
  CHECK(validate.exit_code == 0);
  CHECK(validate.out.find("ok") != std::string::npos);

  const CliResult list = run_cli("list");
  CHECK(list.exit_code == 0);
  CHECK(list.out.find("layer_norm") != std::string::npos);
  CHECK(list.out.find("redistribute") != std::string::npos);
  // Every split the placement parser accepts (core/placement.cpp), zigzag included (issue 51).
  CHECK(list.out.find("Shard(AXIS[, chunk|balanced|padded|zigzag])") != std::string::npos);
}

TEST_CASE("cli: --resources prints and reports each run's peak RSS and wall time, only on request",
          "[cli]") {
  TempDir dir;
  const std::string scenario =
      shell_quoted(source_scenario("layernorm_train_sequence_sharded.toml"));
  const CliResult plain = run_cli("run --quiet " + scenario + " -p f32 --report " +
                                  shell_quoted(dir.path() / "plain.json"));
  REQUIRE(plain.exit_code == 0);
  CHECK(plain.out.find("resources") == std::string::npos);
  CHECK(slurp(dir.path() / "plain.json").find("\"resources\"") == std::string::npos);

  const CliResult measured = run_cli("run --quiet --resources " + scenario + " -p f32 --report " +
                                     shell_quoted(dir.path() / "r.json"));
  REQUIRE(measured.exit_code == 0);
  // 4 ranks own 4,4,4,1 of the 13 tokens of both batch rows (hidden 16, f32 = 4 bytes); each
  // keeps its x rows and a mean and an rstd per row: 2*4*16*4 + 2*(2*4)*4 = 576 bytes, the
  // last rank 2*1*16*4 + 2*(2*1)*4 = 144.
  CHECK(measured.out.find("resources (f32): peak RSS ") == 0);
  CHECK(measured.out.find("; activation bytes per rank: 576 576 576 144\n") != std::string::npos);
  const nlohmann::json report = nlohmann::json::parse(slurp(dir.path() / "r.json"));
  const nlohmann::json& resources = report["runs"][0]["resources"];
  // A running process has at least its binary and stack resident, and the run took some time.
  CHECK(resources["peak_rss_bytes"].get<std::int64_t>() > (1 << 20));
  CHECK(resources["wall_seconds"].get<double>() > 0);
}
