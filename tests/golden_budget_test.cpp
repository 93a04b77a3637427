// Error budgets of correct narrow programs (budget.hpp): the gap measure and the allowance
// derived by hand, budgets of a tiny scenario derived by hand, the manifest round trip, and
// compare --precision's verdicts on correct programs and on a backend with a bug.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <string>

#include "core/error.hpp"
#include "golden/golden_compare.hpp"
#include "golden/golden_set.hpp"

using namespace shardsim;

namespace {

RunReport captured_run(const Scenario& scenario, const std::string& precision,
                       std::optional<ReduceOrder> order = std::nullopt) {
  RunOptions options;
  options.capture_tensors = true;
  options.reduce_order = order;
  return evaluate(scenario, parse_precision(precision), options);
}

const GoldenEntry& entry_named(const GoldenSet& set, const std::string& name) {
  for (const GoldenEntry& e : set.entries) {
    if (e.tensor.name == name) return e;
  }
  FAIL("no golden entry " << name);
  return set.entries.front();
}

// A linear layer y = x W^T on x[1, 3] = 1 + 3 * 2^-10 (constant), W[2, 3] = 1, column-parallel
// over 2 ranks, bias-free.
const char* kTinyLinear = R"toml(
name = "tiny_linear"
seed = 1
precisions = ["f64"]
[mesh]
ranks = 2
[[tensors]]
name = "x"
axes = ["seq", "hidden"]
shape = [1, 3]
init = { dist = "constant", value = 1.0029296875 }
placement = "Replicate"
[[tensors]]
name = "w"
role = "parameter"
axes = ["ffn", "hidden"]
shape = [2, 3]
init = { dist = "constant", value = 1.0 }
placement = "Shard(ffn)"
[[steps]]
op = "linear"
input = "x"
weight = "w"
output = "y"
parallel = "column"
)toml";

}  // namespace

TEST_CASE("budget: the gap of a program from a golden, derived by hand", "[budget]") {
  // bf16 has 8 significant bits: ulp(1) = 2^-7, ulp(2) = 2^-6, ulp(4) = 2^-5.
  GapMeter meter(NarrowFormat::bf16, {1.0, 2.0, -4.0});
  meter.add(0, 1.0 + 0x1p-7);   // the next bf16 up: 1 ulp, |p - g| = 2^-7
  meter.add(1, 2.0 + 0x1p-9);   // a quarter ulp: rounds back to 2, 0 ulp, |p - g| = 2^-9
  meter.add(2, -4.0 - 0x1p-5);  // 1 ulp of 4: |p - g| = 2^-5, the largest
  // normwise = max |p - g| / max |g| = 2^-5 / 4 = 2^-7; ulp = 1.
  CHECK(meter.gap().normwise == 0x1p-7);
  CHECK(meter.gap().ulp == 1);
  meter.add(1, std::nan(""));  // a NaN never matches
  CHECK(std::isinf(meter.gap().normwise));
  CHECK(std::isinf(meter.gap().ulp));

  GapMeter zeros(NarrowFormat::f16, {0.0, 0.0});
  zeros.add(0, -0.0);  // -0 matches +0
  CHECK(zeros.gap().normwise == 0);
  CHECK(zeros.gap().ulp == 0);
  zeros.add(1, 0x1p-24);  // the smallest f16 subnormal: 1 ulp from 0, and max |g| = 0
  CHECK(std::isinf(zeros.gap().normwise));
  CHECK(zeros.gap().ulp == 1);
}

TEST_CASE("budget: a backend may show twice the budget plus one unit in the last place",
          "[budget]") {
  // bf16: 8 significant bits, one unit 2^(1 - 8) = 2^-7 normwise; f16: 11 bits, 2^-10.
  CHECK(allowed_normwise(NarrowFormat::bf16, 0x1p-8) == 2 * 0x1p-8 + 0x1p-7);
  CHECK(allowed_normwise(NarrowFormat::f16, 0) == 0x1p-10);
}

TEST_CASE("budget: the budgets of a tiny linear layer, derived by hand", "[budget]") {
  const Scenario scenario = parse_scenario(kTinyLinear, "tiny_linear.toml");
  const GoldenSet set =
      build_goldens(scenario, captured_run(scenario, "mp256"), {.write_f64 = false,
                                                                .write_f32 = false,
                                                                .write_bf16 = true});
  REQUIRE(set.budgets);
  CHECK_FALSE(set.budgets->bf16_unavailable);
  // x = 1 + 3 * 2^-10 is 3/8 of a bf16 ulp (2^-7) above 1: every bf16 program stores 1, and so
  // does the golden (the reference rounded once): budget 0.
  const GoldenEntry& x = entry_named(set, "bf16/inputs/x");
  REQUIRE(x.budget);
  CHECK(x.budget->normwise == 0);
  CHECK(x.budget->ulp == 0);
  // y = 3 x = 3 + 9 * 2^-10 in the reference: 9/16 of ulp(3) = 2^-6 above 3, so the golden is
  // 3 + 2^-6. Every bf16 program sums its stored x = 1 three times (exact in f32) and stores 3:
  // 1 ulp below the golden, normwise 2^-6 / (3 + 2^-6) = 1 / 193.
  const GoldenEntry& y = entry_named(set, "bf16/s1/c1/y");
  REQUIRE(y.budget);
  CHECK(y.budget->ulp == 1);
  CHECK(y.budget->normwise == 0x1p-6 / (3 + 0x1p-6));
  // Each rank's shard y[:, r] is the same value: the same budget.
  const GoldenEntry& shard = entry_named(set, "bf16/s1/c1/y@rank1[ffn=1:2]");
  REQUIRE(shard.budget);
  CHECK(shard.budget->ulp == 1);
  // No budget for a format the set does not write, nor for an F32 tensor.
  CHECK_FALSE(set.budgets->f16_unavailable);
  const GoldenSet wide = build_goldens(scenario, captured_run(scenario, "mp256"), {});
  CHECK_FALSE(wide.budgets);
  CHECK(wide.manifest.find("\"budget") == std::string::npos);
}

TEST_CASE("budget: a scenario with faults has no correct program, so no budgets", "[budget]") {
  const Scenario scenario =
      load_scenario(std::string(SHARDSIM_SOURCE_DIR) + "/scenarios/faults/norm_eps_mismatch.toml");
  const GoldenSet set = build_goldens(scenario, captured_run(scenario, "mp128"),
                                      {.write_f64 = false, .write_f32 = false, .write_bf16 = true});
  REQUIRE(set.budgets);
  REQUIRE(set.budgets->bf16_unavailable);
  CHECK(set.budgets->bf16_unavailable->find("faults (eps_mismatch)") != std::string::npos);
  for (const GoldenEntry& e : set.entries) CHECK_FALSE(e.budget);
}
