// Helpers of the tests that run the shardsim CLI: running it as a child process (optionally as an
// unprivileged user), scratch directories, a tiny valid scenario, and the bad-input contract
// "exit 2, one located message, nothing written".
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace cli_test {

namespace fs = std::filesystem;

struct CliResult {
  int exit_code = -1;
  int signal = 0;  // the terminating signal when the child was killed
  std::string out;
  std::string err;
};

inline std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

inline std::string q(const fs::path& path) { return "'" + path.string() + "'"; }

// A scratch directory, unique per process and instance, world-accessible (so the CLI can run in
// it as nobody), removed on destruction.
class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = fs::temp_directory_path() /
            ("shardsim_robust_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path_);
    fs::create_directories(path_);
    fs::permissions(path_, fs::perms::all);
  }
  ~TempDir() {
    std::error_code ignored;
    fs::permissions(path_, fs::perms::all, ignored);
    fs::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }
  fs::path write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name, std::ios::binary) << text;
    return path_ / name;
  }

 private:
  fs::path path_;
};

// A tiny valid scenario for the bad-input tests. Line numbers matter to them:
//   2 precisions, 5 ranks, 8 tensor name, 10 shape, 11 placement, 14 op, 15 input, 16 output.
inline const std::string kTiny = R"toml(name = "tiny"
precisions = ["f64"]

[mesh]
ranks = 2

[[tensors]]
name = "x"
axes = ["batch", "seq", "hidden"]
shape = [2, 5, 4]
placement = "Shard(seq)"

[[steps]]
op = "layer_norm"
input = "x"
output = "y"
)toml";

// `text` with the first occurrence of `from` replaced by `to` (which must occur).
inline std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const std::size_t at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

// Names in `dir`, sorted (empty when `dir` does not exist).
inline std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// Runs `PREFIX shardsim ARGS` through the shell (ARGS already quoted), capturing both streams.
// `prefix` may be an environment assignment, `cd DIR &&`, or a setpriv command.
inline CliResult run_cli(const std::string& args, const std::string& prefix = "") {
  TempDir capture;
  const std::string command = prefix + " '" + std::string(SHARDSIM_BINARY) + "' " + args + " > " +
                              q(capture.path() / "out") + " 2> " + q(capture.path() / "err");
  const int status = std::system(command.c_str());
  CliResult result;
  REQUIRE(WIFEXITED(status));  // a crash is never an acceptable answer
  result.exit_code = WEXITSTATUS(status);
  result.out = slurp(capture.path() / "out");
  result.err = slurp(capture.path() / "err");
  return result;
}

// The prefix that runs a command as nobody:nogroup (uid/gid 65534) with no supplementary groups,
// or "" when setpriv is missing or not permitted (then the permission tests skip with a reason).
// As root, permission bits do not stop the process, so the unreadable/unwritable cases need it.
inline std::string as_nobody() {
  static const std::string prefix = [] {
    if (::geteuid() != 0) return std::string(" ");  // already unprivileged: bits apply
    const int status = std::system(
        "setpriv --reuid=65534 --regid=65534 --clear-groups true "
        ">/dev/null 2>&1");
    return WIFEXITED(status) && WEXITSTATUS(status) == 0
               ? std::string("setpriv --reuid=65534 --regid=65534 --clear-groups")
               : std::string();
  }();
  return prefix;
}

inline std::string source_scenario(const std::string& name) {
  return (fs::path(SHARDSIM_SOURCE_DIR) / "scenarios" / name).string();
}

// True when no name in `dir` (recursively) contains ".tmp.".
inline bool no_temp_files(const fs::path& dir) {
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->path().filename().string().find(".tmp.") != std::string::npos) return false;
  }
  return true;
}

}  // namespace cli_test
