// The normalization fault catalogue: each seeded bug is a scenario switch that changes the
// sharded plan only. For every fault, scenarios/faults/norm_FAULT.toml must fail with the first
// divergence its [expect] names (step, tensor, op), its clean twin scenarios/norm_FAULT_clean.toml
// (the same scenario without the fault) must pass, and the divergence must persist at mp256, so
// it is a bug and not rounding noise.
#include <algorithm>
#include <catch2/catch.hpp>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "compare/compare.hpp"
#include "scenario/scenario.hpp"

using shardsim::RunReport;
using shardsim::Scenario;

namespace {

const std::vector<std::string>& norm_faults() {
  static const std::vector<std::string> faults = {
      "combine_token_means", "rmsnorm_substituted", "hidden_shard_local_stats",
      "unbiased_variance",   "eps_mismatch",        "unreduced_param_grads",
      "loss_averaged_twice", "average_of_rank_means", "padding_in_loss",
      "dtype_mismatch",      "ones_init_assumed",   "wrong_axis"};
  return faults;
}

Scenario load(const std::string& relative) {
  return shardsim::load_scenario(std::string(SHARDSIM_SOURCE_DIR) + "/scenarios/" + relative);
}

std::vector<RunReport> run_all(const Scenario& s) {
  std::vector<RunReport> reports;
  for (const shardsim::Precision& p : s.precisions) reports.push_back(shardsim::evaluate(s, p));
  return reports;
}

// Same program: tensors (names, shapes, init, placements), steps and their keys, mesh, training.
void require_twins(const Scenario& faulty, const Scenario& clean) {
  REQUIRE(faulty.tensors.size() == clean.tensors.size());
  for (std::size_t i = 0; i < faulty.tensors.size(); ++i) {
    const auto& a = faulty.tensors[i];
    const auto& b = clean.tensors[i];
    CHECK(a.name == b.name);
    CHECK(a.shape == b.shape);
    CHECK(a.layout.on(0) == b.layout.on(0));
    CHECK(a.init_seed == b.init_seed);
  }
  REQUIRE(faulty.steps.size() == clean.steps.size());
  for (std::size_t i = 0; i < faulty.steps.size(); ++i) {
    CHECK(faulty.steps[i].kind == clean.steps[i].kind);
    CHECK(faulty.steps[i].params.size() == clean.steps[i].params.size());
  }
  CHECK(faulty.mesh.ranks() == clean.mesh.ranks());
  CHECK(faulty.train_steps == clean.train_steps);
  CHECK(faulty.precisions == clean.precisions);
  CHECK(clean.faults.empty());
  CHECK(clean.expect.pass);
}

}  // namespace

TEST_CASE("every normalization fault is in the catalogue", "[faults]") {
  std::vector<std::string> known;
  for (const shardsim::FaultInfo& f : shardsim::fault_catalogue()) known.push_back(f.name);
  for (const std::string& fault : norm_faults()) {
    INFO(fault);
    CHECK(std::find(known.begin(), known.end(), fault) != known.end());
  }
}

TEST_CASE("each normalization fault fails where its scenario says and its clean twin passes",
          "[faults]") {
  for (const std::string& fault : norm_faults()) {
    INFO("fault " << fault);
    const Scenario faulty = load("faults/norm_" + fault + ".toml");
    const Scenario clean = load("norm_" + fault + "_clean.toml");
    REQUIRE(faulty.fault_names() == std::vector<std::string>{fault});
    REQUIRE_FALSE(faulty.expect.pass);
    REQUIRE(faulty.expect.step.has_value());
    REQUIRE(faulty.expect.tensor.has_value());
    require_twins(faulty, clean);

    const shardsim::Outcome bad = shardsim::judge(faulty, run_all(faulty));
    INFO(bad.why);
    CHECK_FALSE(bad.pass);
    CHECK(bad.matches_expectation);
    REQUIRE(bad.first_divergence.has_value());
    CHECK(bad.first_divergence->step == *faulty.expect.step);
    CHECK(bad.first_divergence->tensor == *faulty.expect.tensor);
    // It names a rank and, for a non-scalar tensor, the global index by named axis.
    CHECK(bad.first_divergence->rank >= 0);
    CHECK(bad.first_divergence->rank < faulty.mesh.ranks());

    const shardsim::Outcome good = shardsim::judge(clean, run_all(clean));
    INFO(good.why);
    CHECK(good.pass);
    CHECK(good.matches_expectation);

    // At high precision the same boundary still fails: not rounding noise.
    const RunReport mp = shardsim::evaluate(faulty, shardsim::parse_precision("mp256"));
    CHECK_FALSE(mp.pass);
    REQUIRE(mp.first_divergence.has_value());
    CHECK(mp.first_divergence->step == *faulty.expect.step);
    CHECK(mp.first_divergence->tensor == *faulty.expect.tensor);
  }
}

// The replay's first divergence is the earliest boundary that fails at any of its precisions
// (earliest_failure), not the first failing precision's. norm_wrong_axis with another seed is a
// case where they differ: the tokens the wrong mask counts instead of the real ones happen to
// have nearly the same total squared error, so the all-reduced loss sum (#7) moves by only about
// 4.8e-4 relative (366.909 -> 367.087). f32's rtol is 2^(16 - 24) = 2^-8 =
// 3.9e-3 of the scalar's scale (its addends' magnitude, at least |d|): `within`. f64's is
// 2^(16 - 53) = 2^-37 = 7.3e-12: `fail`. f32 then fails at grad(y) (#10), an exact boundary
// where a real token got a padding token's zero gradient. The program left its oracle at #7.
TEST_CASE("wrong_axis at another seed: the first divergence is the earliest at any precision",
          "[faults]") {
  std::ifstream in(std::string(SHARDSIM_SOURCE_DIR) + "/scenarios/faults/norm_wrong_axis.toml");
  std::stringstream text;
  text << in.rdbuf();
  std::string toml = text.str();
  const std::string::size_type at = toml.find("seed = 20261201\n");
  REQUIRE(at != std::string::npos);
  toml.replace(at, 15, "seed = 20361204");
  const Scenario faulty = shardsim::parse_scenario(toml, "norm_wrong_axis (seed 20361204)");
  REQUIRE(faulty.precisions.size() == 3);  // f32, f64, mp256
  const std::vector<RunReport> reports = run_all(faulty);
  // The premise: f32 passes the loss sum that f64 and mp256 fail, and fails later.
  for (const RunReport& r : reports) REQUIRE(r.first_divergence.has_value());
  const int loss_sum = reports[1].first_divergence->boundary;
  CHECK(reports[1].first_divergence->tensor == "loss.sum");
  CHECK(reports[2].first_divergence->tensor == "loss.sum");
  CHECK(reports[2].first_divergence->boundary == loss_sum);
  CHECK(reports[0].first_divergence->tensor == "grad(y)");
  CHECK(reports[0].first_divergence->boundary > loss_sum);
  const auto f32_loss_sum =
      std::find_if(reports[0].boundaries.begin(), reports[0].boundaries.end(),
                   [&](const shardsim::BoundaryResult& b) { return b.entry.id == loss_sum; });
  REQUIRE(f32_loss_sum != reports[0].boundaries.end());
  CHECK(f32_loss_sum->entry.tensor == "loss.sum");
  CHECK(f32_loss_sum->status == shardsim::Status::within);

  const shardsim::Outcome outcome = shardsim::judge(faulty, reports);
  INFO(outcome.why);
  CHECK(outcome.matches_expectation);  // [expect] names loss.sum
  REQUIRE(outcome.first_divergence.has_value());
  CHECK(outcome.first_divergence->tensor == "loss.sum");
  REQUIRE(outcome.failed_at.has_value());
  CHECK(outcome.failed_at->name() == "f64");  // mp256 fails there too, but runs later

  // Ties and passes, on reports built by hand.
  auto report = [](const char* precision, std::optional<int> boundary) {
    RunReport r;
    r.precision = shardsim::parse_precision(precision);
    r.pass = !boundary;
    if (boundary) r.first_divergence = shardsim::Divergence{.boundary = *boundary};
    return r;
  };
  CHECK(shardsim::earliest_failure({report("f32", {}), report("f64", {})}) == nullptr);
  const std::vector<RunReport> tie = {report("f32", 9), report("f64", 4), report("mp256", 4)};
  CHECK(shardsim::earliest_failure(tie) == &tie[1]);
  const std::vector<RunReport> late = {report("f32", 3), report("f64", {}), report("mp256", 8)};
  CHECK(shardsim::earliest_failure(late) == &late[0]);
}

TEST_CASE("unreduced_param_grads: the replica check names the rank that drifted", "[faults]") {
  const Scenario faulty = load("faults/norm_unreduced_param_grads.toml");
  const RunReport report = shardsim::evaluate(faulty, shardsim::parse_precision("f64"));
  REQUIRE(report.first_divergence.has_value());
  const shardsim::Divergence& d = *report.first_divergence;
  CHECK(d.op == "replica_check");
  CHECK(d.step == 1);
  CHECK(d.rank == 1);  // rank 0 is the reference; rank 1 is the first that differs
}

TEST_CASE("dtype_mismatch: a gap that does not shrink with precision", "[faults]") {
  // The normalized value is rounded through float: a relative gap of up to 2^-24 whatever the
  // run's own precision. At f64 and at mp256 alike, y's max_rel stays above 2^-30 (it would be
  // ~2^-53 and ~2^-257 if it were rounding noise of the run's type), while the clean twin is
  // bitwise exact at both.
  const Scenario faulty = load("faults/norm_dtype_mismatch.toml");
  const Scenario clean = load("norm_dtype_mismatch_clean.toml");
  for (const char* level : {"f64", "mp256"}) {
    INFO(level);
    auto y_of = [&](const Scenario& s) {
      const RunReport report = shardsim::evaluate(s, shardsim::parse_precision(level));
      for (const shardsim::BoundaryResult& b : report.boundaries) {
        if (b.entry.tensor == "y") return b;
      }
      FAIL("no boundary y");
      return shardsim::BoundaryResult{};
    };
    const shardsim::BoundaryResult bad = y_of(faulty);
    CHECK(bad.status == shardsim::Status::fail);
    CHECK((bad.max_abs / bad.scale).to_double() > 0x1p-30);
    CHECK((bad.max_abs / bad.scale).to_double() < 0x1p-22);  // one float rounding of a value times weight + bias
    CHECK(y_of(clean).status == shardsim::Status::exact);
  }
  // And in an f32 run the cast is the identity: the fault cannot show there.
  const RunReport f32 = shardsim::evaluate(faulty, shardsim::parse_precision("f32"));
  CHECK(f32.pass);
}
