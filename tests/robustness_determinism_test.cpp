// Determinism: every bundled scenario, run twice through the CLI with --report and
// --golden, gives byte-identical reports and goldens, and the second run changes everything that
// must not matter at once: the locale (LC_ALL/LANG: de_DE.UTF-8 when installed, else C.UTF-8,
// versus POSIX), the thread-count variables (OMP/OPENBLAS/MKL_NUM_THREADS 1 versus 7) and the
// working directory (/ versus a scratch directory; the scenario path is the same absolute path,
// because the report records the path as given).
#include <set>

#include "cli_test_support.hpp"

using namespace cli_test;

namespace {

std::vector<fs::path> bundled_scenarios() {
  std::vector<fs::path> all;
  for (const auto& e : fs::recursive_directory_iterator(fs::path(SHARDSIM_SOURCE_DIR) / "scenarios")) {
    if (e.path().extension() == ".toml") all.push_back(e.path());
  }
  std::sort(all.begin(), all.end());
  return all;
}

std::string other_locale() {
  const int status = std::system("locale -a 2>/dev/null | grep -qi '^de_DE.utf-\\?8$'");
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? "de_DE.UTF-8" : "C.UTF-8";
}

// Every file under `dir` (relative name -> bytes).
std::vector<std::pair<std::string, std::string>> files_under(const fs::path& dir) {
  std::vector<std::pair<std::string, std::string>> files;
  if (!fs::exists(dir)) return files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) files.emplace_back(fs::relative(e.path(), dir).string(), slurp(e.path()));
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

TEST_CASE("robustness: bundled scenarios replay byte-identically whatever the environment",
          "[robustness][determinism]") {
  const std::vector<fs::path> scenarios = bundled_scenarios();
  REQUIRE(scenarios.size() >= 10);
  const std::string locale = other_locale();
  TempDir dir;
  for (const fs::path& scenario : scenarios) {
    INFO("scenario " << scenario.string());
    const fs::path a = dir.path() / "a";
    const fs::path b = dir.path() / "b";
    fs::remove_all(a);
    fs::remove_all(b);
    fs::create_directories(a);
    fs::create_directories(b);
    const std::string args = "run --quiet " + q(scenario);
    // Exit 0 or 1 both count (a fault scenario's twin may be judged either way); 2 never.
    const CliResult first =
        run_cli(args + " --report " + q(a / "r.json") + " --golden " + q(a / "g"),
                "cd / && LC_ALL=POSIX LANG=POSIX OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "
                "MKL_NUM_THREADS=1");
    REQUIRE(first.exit_code != 2);
    const CliResult second =
        run_cli(args + " --report " + q(b / "r.json") + " --golden " + q(b / "g"),
                "cd " + q(dir.path()) + " && LC_ALL=" + locale + " LANG=" + locale +
                    " OMP_NUM_THREADS=7 OPENBLAS_NUM_THREADS=7 MKL_NUM_THREADS=7");
    CHECK(second.exit_code == first.exit_code);
    std::string out = second.out;  // the goldens line names the directory, b/ instead of a/
    for (std::size_t at; (at = out.find(b.string())) != std::string::npos;) {
      out.replace(at, b.string().size(), a.string());
    }
    CHECK(out == first.out);
    const auto fa = files_under(a);
    const auto fb = files_under(b);
    REQUIRE(fa.size() == fb.size());
    CHECK(fa.size() >= 3);  // r.json, g/manifest.json, g/goldens.safetensors
    for (std::size_t i = 0; i < fa.size(); ++i) {
      INFO("file " << fa[i].first);
      CHECK(fa[i].first == fb[i].first);
      CHECK((fa[i].second == fb[i].second));
    }
  }
}
