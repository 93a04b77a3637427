// The progress line (sim/cli/progress.hpp): shown on a terminal, erased at the end, and absent
// when stdout is not a terminal or with --quiet. `script` (util-linux, Debian's bsdutils, which is
// essential) runs the CLI on a pseudo-terminal.
#include <catch2/catch.hpp>
#include <string>

#include "cli_test_support.hpp"

using namespace cli_test;

namespace {

// Runs `shardsim ARGS` on a pseudo-terminal and returns what the terminal received.
std::string on_terminal(const std::string& args) {
  TempDir dir;
  const fs::path typescript = dir.path() / "typescript";
  const std::string inner = "'" + std::string(SHARDSIM_BINARY) + "' " + args;
  const std::string command = "script -qec " + q(inner) + " " + q(typescript) + " > /dev/null";
  const int status = std::system(command.c_str());
  REQUIRE(WIFEXITED(status));
  return slurp(typescript);
}

}  // namespace

TEST_CASE("progress: a run on a terminal shows a progress line and erases it", "[cli][progress]") {
  const std::string scenario = q(source_scenario("attention_train_sgd_ring.toml"));
  const std::string seen = on_terminal("run " + scenario + " --precision f64");
  // The first boundary is always drawn (later ones at most ten times a second).
  CHECK(seen.find("\r\033[Kshardsim: f64 step 1 chunk 1 boundary #0 ") != std::string::npos);
  // Erased at the end of the run: an erase sequence follows the last drawing.
  CHECK(seen.find("\r\033[K", seen.rfind("shardsim: f64 step")) != std::string::npos);
  // --quiet: no progress line at all.
  CHECK(on_terminal("run --quiet " + scenario + " --precision f64").find("shardsim: f64 step") ==
        std::string::npos);
}

TEST_CASE("progress: no progress line when stdout is not a terminal", "[cli][progress]") {
  const CliResult r =
      run_cli("run " + q(source_scenario("attention_train_sgd_ring.toml")) + " --precision f64");
  CHECK(r.err.find("shardsim: f64 step") == std::string::npos);
  CHECK(r.err.find('\r') == std::string::npos);
}
