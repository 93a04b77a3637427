// Golden runs at mp256 and qd: what a golden capture keeps (no exact text), the diagnosis that
// reuses it, and the near-midpoint warnings of a qd reference.
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>

#include "cli_test_support.hpp"
#include "compare/compare.hpp"
#include "golden/golden_set.hpp"
#include "runner/runner.hpp"
#include "scenario/scenario.hpp"

using namespace shardsim;

TEST_CASE("capture without exact text keeps every rounded value (run --golden)", "[qd][golden]") {
  // RunOptions::capture_exact = false leaves out only CapturedValues::exact: the rounded values
  // the goldens are written from are those of a full capture, at mp256 and at qd.
  const Scenario scenario =
      load_scenario(cli_test::source_scenario("attention_train_sgd_ring.toml"));
  for (const char* name : {"mp256", "qd"}) {
    RunOptions full;
    full.capture_tensors = true;
    RunOptions lean = full;
    lean.capture_exact = false;
    const RunReport a = evaluate(scenario, parse_precision(name), full);
    const RunReport b = evaluate(scenario, parse_precision(name), lean);
    REQUIRE(a.boundaries.size() == b.boundaries.size());
    std::size_t texts = 0;
    for (std::size_t i = 0; i < a.boundaries.size(); ++i) {
      const CapturedBoundary& x = *a.boundaries[i].captured;
      const CapturedBoundary& y = *b.boundaries[i].captured;
      REQUIRE(x.ranks.size() == y.ranks.size());
      auto same = [&](const CapturedValues& u, const CapturedValues& v) {
        texts += u.exact.size();
        CHECK(v.exact.empty());
        CHECK(u.f64 == v.f64);  // bitwise for these finite values
        CHECK(u.f32 == v.f32);
        CHECK(u.bf16 == v.bf16);
        CHECK(u.f16 == v.f16);
        CHECK(u.near_midpoint == v.near_midpoint);
      };
      if (x.has_dense) same(x.dense, y.dense);
      for (std::size_t r = 0; r < x.ranks.size(); ++r) same(x.ranks[r], y.ranks[r]);
    }
    CHECK(texts > 0);  // the full capture did keep the text
  }
}

TEST_CASE("a failing golden run's diagnosis reuses its capture without exact text", "[golden]") {
  // The replay run that captures the goldens keeps no exact texts; after a divergence the
  // diagnosis's precision trend reuses that run's report (it read the missing texts once and
  // crashed). Its stdout is the run's without --golden plus the goldens line.
  const std::string scenario =
      cli_test::q(cli_test::source_scenario("faults/attention_cache_raw_k.toml"));
  cli_test::TempDir dir;
  const auto plain = cli_test::run_cli("run " + scenario + " --precision mp256");
  const auto golden = cli_test::run_cli("run " + scenario + " --precision mp256 --golden " +
                                        cli_test::q(dir.path() / "g"));
  INFO(golden.err);
  CHECK(golden.signal == 0);
  CHECK(golden.exit_code == plain.exit_code);
  CHECK(plain.out.find("probable causes") != std::string::npos);  // a diagnosis did run
  const std::size_t at = golden.out.find("goldens: ");
  REQUIRE(at != std::string::npos);
  const std::size_t end = golden.out.find('\n', at);
  CHECK(golden.out.substr(0, at) + golden.out.substr(end + 1) == plain.out);
}

TEST_CASE("qd: past 8 flagged golden tensors the warnings end in one counting line", "[qd]") {
  // attention_cache_raw_k's projections of f32-representable inputs give exact F64 ties in many
  // tensors (counted from the entries themselves, not assumed).
  const Scenario scenario =
      load_scenario(cli_test::source_scenario("faults/attention_cache_raw_k.toml"));
  RunOptions options;
  options.capture_tensors = true;
  options.capture_exact = false;
  const GoldenSet set =
      build_goldens(scenario, evaluate(scenario, parse_precision("qd"), options), GoldenOptions{});
  std::int64_t tensors = 0, values = 0, listed_values = 0;
  for (const GoldenEntry& e : set.entries) {
    if (e.near_midpoint == 0) continue;
    if (++tensors <= 8) {
      listed_values += e.near_midpoint;
      CHECK(set.warnings[static_cast<std::size_t>(tensors - 1)].starts_with("golden " +
                                                                            e.tensor.name + ": "));
    }
    values += e.near_midpoint;
  }
  REQUIRE(tensors > 8);
  REQUIRE(set.warnings.size() == 9);
  CHECK(set.warnings.back() == "and " + std::to_string(tensors - 8) +
                                   " more golden tensor(s) with " +
                                   std::to_string(values - listed_values) +
                                   " such value(s): manifest.json gives each tensor's "
                                   "\"near_midpoint\"");
}
