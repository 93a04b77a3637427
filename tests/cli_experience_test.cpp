// What a new user sees in the run tables and verdict lines: the activation-memory line only where
// something is kept for backward, the first divergence printed once, columns that hold the
// longest op name, and mp divergences printed with digits enough to differ.
#include "cli_test_support.hpp"

using namespace cli_test;

namespace {

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("cli: the activation-memory line appears only when a backward pass runs", "[cli]") {
  const CliResult forward =
      run_cli("run -p f64 '" + source_scenario("layernorm_sequence_sharded.toml") + "'");
  REQUIRE(forward.exit_code == 0);
  CHECK(forward.out.find("activation memory") == std::string::npos);
  const CliResult training =
      run_cli("run -p f64 '" + source_scenario("layernorm_train_sequence_sharded.toml") + "'");
  REQUIRE(training.exit_code == 0);
  CHECK(count(training.out, "activation memory kept for backward, bytes per rank:") == 1);
}

TEST_CASE("cli: the first divergence is printed once, in its table or (quiet) in the verdict",
          "[cli]") {
  const std::string scenario =
      "'" + source_scenario("faults/norm_unbiased_variance.toml") + "' -p f64";
  const CliResult tables = run_cli("run " + scenario);
  REQUIRE(tables.exit_code == 0);  // the fault's divergence is expected
  CHECK(count(tables.out, "index [batch=") == 1);
  CHECK(tables.out.find("first divergence: step 1 chunk 1 boundary #") != std::string::npos);
  CHECK(tables.out.find("FAIL (first divergence at f64: in its table above)") != std::string::npos);
  const CliResult quiet = run_cli("run --quiet " + scenario);
  CHECK(count(quiet.out, "index [batch=") == 1);
  CHECK(quiet.out.find("FAIL (first divergence at f64: step 1 chunk 1 boundary #") !=
        std::string::npos);
}

TEST_CASE("cli: table columns hold the longest op name", "[cli]") {
  const CliResult r = run_cli("run -p f64 '" + source_scenario("attention_stream_cp1.toml") + "'");
  REQUIRE(r.exit_code == 0);
  std::istringstream lines(r.out);
  std::string line, header;
  std::size_t rows = 0;
  while (std::getline(lines, line)) {
    if (line.find("  op ") != std::string::npos && line.find("tensor") != std::string::npos)
      header = line;
    if (line.find(" sliding_window_attention ") == std::string::npos) continue;
    REQUIRE_FALSE(header.empty());
    // The tensor column starts where its heading does: "y" right after the op and one space.
    const std::size_t op = line.find("sliding_window_attention");
    CHECK(line.find_first_not_of(' ', op + 24) == header.find("tensor"));
    ++rows;
  }
  CHECK(rows > 0);
}

TEST_CASE("cli: an mp divergence prints values with digits enough to tell them apart", "[cli]") {
  // sum_sumsq reorders the hidden sums across ranks: at mp256 the gap is about 2^-250, far
  // below what a double can show, and an mp256 tolerance of 1e-300 makes it a divergence.
  TempDir dir;
  const fs::path scenario = dir.write(
      "s.toml", replaced(slurp(source_scenario("norm_hidden_sum_sumsq.toml")),
                         "precisions = [\"f32\", \"f64\", \"mp256\"]", "precisions = [\"mp256\"]") +
                    "\n[tolerance]\nmp256 = 1e-300\n");
  const CliResult r = run_cli("run " + q(scenario));
  REQUIRE(r.exit_code == 1);
  const std::size_t at = r.out.find("first divergence: ");
  REQUIRE(at != std::string::npos);
  const std::string line = r.out.substr(at, r.out.find('\n', at) - at);
  INFO(line);
  const std::size_t dense = line.find("dense ") + 6;
  const std::size_t sharded = line.find(", sharded ") + 10;
  const std::string d = line.substr(dense, line.find(',', dense) - dense);
  const std::string s = line.substr(sharded, line.find(' ', sharded) - sharded);
  CHECK(d != s);
  CHECK(d.size() > 20);  // more than a double's 17 digits
  CHECK(d.size() == s.size());
}

// The allocator settings (sim/cli/main.cpp, docs/threads-and-memory.md "Memory: the allocator
// settings"): without GLIBC_TUNABLES, where the kernel gives huge pages, shardsim starts itself
// again with glibc's huge-page settings, and `--version` (in that second start) prints them; a
// GLIBC_TUNABLES of the user's, empty included, is left as it is. Only memory placement may change:
// the reports of both starts are byte-identical.
TEST_CASE("cli: allocator settings are shardsim's unless GLIBC_TUNABLES is set", "[cli]") {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  const bool applies = false;  // sanitizer builds keep their own allocator
#else
  // Only where the kernel gives transparent huge pages to advised memory.
  const std::string thp = slurp("/sys/kernel/mm/transparent_hugepage/enabled");
  const bool applies =
      thp.find("[always]") != std::string::npos || thp.find("[madvise]") != std::string::npos;
#endif
  const std::string ours =
      "allocator: glibc.malloc.hugetlb=1:glibc.malloc.mmap_threshold=33554432:"
      "glibc.malloc.top_pad=67108864\n";
  const CliResult unset = run_cli("--version", "env -u GLIBC_TUNABLES -u LD_PRELOAD");
  REQUIRE(unset.exit_code == 0);
  CHECK(unset.out.find("shardsim ") == 0);
  CHECK((unset.out.find(ours) != std::string::npos) == applies);
  const CliResult users = run_cli("--version", "GLIBC_TUNABLES=glibc.malloc.hugetlb=0");
  REQUIRE(users.exit_code == 0);
  CHECK(users.out.find("allocator: GLIBC_TUNABLES=\"glibc.malloc.hugetlb=0\" (from the "
                       "environment)\n") != std::string::npos);

  TempDir dir;
  const fs::path scenario = dir.write("scenario.toml", cli_test::kTiny);
  const std::string args = "run --quiet " + cli_test::q(scenario) + " --precision f32,f64,mp128";
  const CliResult with =
      run_cli(args + " --report " + cli_test::q(dir.path() / "with.json"), "env -u GLIBC_TUNABLES");
  const CliResult without =
      run_cli(args + " --report " + cli_test::q(dir.path() / "without.json"), "GLIBC_TUNABLES=");
  REQUIRE(with.exit_code == 0);
  REQUIRE(without.exit_code == 0);
  CHECK(slurp(dir.path() / "with.json") == slurp(dir.path() / "without.json"));
}
