// Interruption: SIGINT or SIGTERM in the middle of a golden write leaves the previous
// complete files or nothing, and never a temporary file (sim/core/io.cpp registers the temporary
// paths with a signal handler that unlinks them and re-raises).
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>

#include <chrono>
#include <thread>

#include "cli_test_support.hpp"

using namespace cli_test;

namespace {

// A LayerNorm big enough that its npy goldens (hundreds of files, each fsynced) take a while to
// write: x[batch=4, seq=256, hidden=256] over 4 ranks, f64 only.
const std::string kLarge = R"toml(name = "large_write"
precisions = ["f64"]

[mesh]
ranks = 4

[[tensors]]
name = "x"
axes = ["batch", "seq", "hidden"]
shape = [4, 256, 256]
placement = "Shard(seq)"

[[steps]]
op = "layer_norm"
input = "x"
output = "y"
)toml";

bool has_temp(const fs::path& dir) { return !no_temp_files(dir); }

// Starts `shardsim run SCENARIO --golden DIR ...`, waits until a temporary file appears in DIR
// (the write is in progress), sends `sig`, and returns the wait status; `interrupted` tells
// whether the signal was sent while a temporary file existed.
int interrupt_golden_write(const fs::path& scenario, const fs::path& golden, int sig,
                           bool& interrupted) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::dup2(null, 2);
    // A shell's background job (or nohup) inherits SIGINT ignored, and shardsim rightly leaves an
    // ignored signal alone; the test wants the interactive case, so restore the default.
    for (const int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) ::signal(s, SIG_DFL);
    const struct rlimit no_core { 0, 0 };  // SIGQUIT's default action dumps core: not here
    ::setrlimit(RLIMIT_CORE, &no_core);
    ::execl(SHARDSIM_BINARY, "shardsim", "run", "--quiet", scenario.c_str(), "--golden",
            golden.c_str(), "--reference", "f64", "--dtype", "both", "--format", "npy",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  interrupted = false;
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    if (::waitpid(pid, &status, WNOHANG) == pid) return status;  // finished before we saw it
    if (has_temp(golden)) {
      ::kill(pid, sig);
      interrupted = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  if (!interrupted) ::kill(pid, SIGKILL);
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return status;
}

}  // namespace

TEST_CASE(
    "robustness: SIGINT/SIGTERM/SIGHUP/SIGQUIT during a golden write leave the old files or "
    "nothing",
    "[robustness]") {
  TempDir dir;
  const fs::path scenario = dir.write("large.toml", kLarge);
  for (const int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) {
    INFO("signal " << sig);
    const std::string name = sig == SIGINT    ? "INT"
                             : sig == SIGTERM ? "TERM"
                             : sig == SIGHUP  ? "HUP"
                                              : "QUIT";
    SECTION("into a new directory, SIG" + name) {
      const fs::path golden = dir.path() / "new";
      bool interrupted = false;
      const int status = interrupt_golden_write(scenario, golden, sig, interrupted);
      if (!interrupted) {
        WARN("the write finished before a temporary file was seen; nothing was interrupted");
        CHECK(WIFEXITED(status));
      } else {
        // Killed by the re-raised signal, not an exit: the shell sees 128 + sig.
        REQUIRE(WIFSIGNALED(status));
        CHECK(WTERMSIG(status) == sig);
        // Nothing: the handler removed the temporaries and the directory it had created.
        CHECK_FALSE(fs::exists(golden));
      }
    }
    SECTION("over a previous complete set, SIG" + name) {
      const fs::path golden = dir.path() / "old";
      // The previous set: the same scenario with a different seed, so every data file differs.
      const fs::path other = dir.write("other.toml", "seed = 7\n" + kLarge);
      const CliResult first = run_cli("run --quiet " + q(other) + " --golden " + q(golden) +
                                      " --reference f64 --dtype both --format npy");
      REQUIRE(first.exit_code == 0);
      std::vector<std::pair<std::string, std::string>> before;
      for (const std::string& name : entries(golden)) before.emplace_back(name, slurp(golden / name));
      bool interrupted = false;
      const int status = interrupt_golden_write(scenario, golden, sig, interrupted);
      CHECK(no_temp_files(golden));
      if (!interrupted) {
        WARN("the write finished before a temporary file was seen; nothing was interrupted");
      } else {
        REQUIRE(WIFSIGNALED(status));
        CHECK(WTERMSIG(status) == sig);
        // The previous files, byte for byte, and nothing else.
        std::vector<std::pair<std::string, std::string>> after;
        for (const std::string& name : entries(golden)) after.emplace_back(name, slurp(golden / name));
        CHECK(after == before);
      }
    }
  }
}
