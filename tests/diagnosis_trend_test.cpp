// precision_trend (signatures.hpp): the diagnosis reads the same trend verdict as `shardsim
// precision` (precision/trend_fit.hpp), so the two never disagree. Synthetic ladders with
// hand-derived gaps, then the bundled ill-conditioned scenario, where the former fixed-tolerance
// rule (the gap persists above the top level's rtol: "a bug, not rounding") and `precision`'s
// `ill-conditioned noise` disagreed.
#include <catch2/catch.hpp>

#include "diagnosis/diagnosis.hpp"
#include "diagnosis/signatures.hpp"
#include "precision/precision_diff.hpp"
#include "scenario/scenario.hpp"

using namespace shardsim;

namespace {

// One level with normwise gap 2^log2_gap (0 for an exact level).
TrendPoint point(const char* level, unsigned bits, std::optional<double> log2_gap) {
  TrendPoint p{parse_precision(level), bits, {}};
  p.gap.status = log2_gap ? Status::fail : Status::exact;
  if (log2_gap) p.gap.max_abs = p.gap.normwise = Magnitude::scaled(1, static_cast<long>(*log2_gap));
  return p;
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("precision_trend: noise, ill-conditioned noise and bug by the trend fit",
          "[diagnosis]") {
  // gap = 2^(26 - bits) at f32, f64, mp128 and mp256 (257 bits): slope exactly -1 per bit, and
  // kappa = gap * 2^bits = 2^26 at every unsaturated level (f32's gap 2^2 is saturated), above
  // 2^20: ill-conditioned noise. The former rule called it a bug: the top gap 2^-231 exceeds
  // mp256's rtol 2^(16 - 257) = 2^-241. Given in any order.
  const std::vector<TrendPoint> ill{point("mp256", 257, -231), point("f32", 24, 2),
                                    point("mp128", 128, -102), point("f64", 53, -27)};
  const Finding f = precision_trend(ill);
  INFO(f.evidence);
  CHECK(f.cause == Cause::rounding);
  CHECK(f.confidence == 0.8);
  CHECK(has(f.evidence, "`shardsim precision --levels f32,f64,mp128,mp256` says ill-conditioned noise"));
  CHECK(has(f.evidence, "slope -1.00 per bit over 4 levels"));
  CHECK(has(f.evidence, "condition 2^26.0"));

  // gap = 2^(10 - bits): kappa 2^10 <= 2^20, plain noise.
  const Finding noise = precision_trend(
      {point("f32", 24, -14), point("f64", 53, -43), point("mp128", 128, -118)});
  CHECK(noise.confidence == 0.9);
  CHECK(has(noise.evidence, "says noise"));

  // The gap stays 2^-5 at every level (slope 0): a bug; rounding is absent.
  const Finding bug =
      precision_trend({point("f32", 24, -5), point("f64", 53, -5), point("mp128", 128, -5)});
  CHECK_FALSE(bug.present());
  CHECK(has(bug.evidence, "says bug (flat as precision grows: slope 0.00"));

  // Two levels read no trend: undetermined, absent (the former rule guessed from two).
  const Finding two = precision_trend({point("f32", 24, -5), point("mp128", 128, -5)});
  CHECK_FALSE(two.present());
  CHECK(has(two.evidence, "says undetermined"));

  // Exact at every level: nothing for rounding to explain.
  CHECK(has(precision_trend({point("f32", 24, {}), point("f64", 53, {}), point("mp128", 128, {})})
                .evidence,
            "says exact"));
}

TEST_CASE("diagnose and precision agree on the ill-conditioned cancellation",
          "[diagnosis][scenario]") {
  // norm_hidden_cancellation_ill_conditioned.toml fails at f32, f64 and mp256 (y.rstd's gap is
  // ~2^26.6 rounding units at every level, over the 2^16 tolerance), yet the gap shrinks like
  // 2^-bits: `precision` says ill-conditioned noise (precision_ladder_test.cpp). The former
  // fixed-tolerance rule of the diagnosis saw the gap persist at mp256 and ruled rounding out.
  const Scenario scenario =
      load_scenario(std::string(SHARDSIM_SOURCE_DIR) +
                    "/scenarios/norm_hidden_cancellation_ill_conditioned.toml");
  std::vector<RunReport> reports;
  for (const Precision& p : scenario.precisions) reports.push_back(evaluate(scenario, p));
  const Diagnosis d = diagnose(scenario, reports);
  REQUIRE(d.analysed);
  CHECK(d.where.find("y.rstd") != std::string::npos);
  REQUIRE_FALSE(d.causes.empty());
  CHECK(d.causes.front().cause == Cause::rounding);
  CHECK(has(d.causes.front().evidence, "says ill-conditioned noise"));

  // `shardsim precision` over the default ladder, which the diagnosis read too.
  std::vector<Precision> levels;
  for (const char* level : {"f32", "f64", "mp128", "mp256"}) levels.push_back(parse_precision(level));
  CHECK(std::string(kDefaultLevels) == "f32,f64,mp128,mp256");
  const PrecisionDiff diff = precision_diff(scenario, {levels, {}, {}});
  const BoundaryDiff& rstd = diff.boundaries.at(static_cast<std::size_t>(d.boundary));
  CHECK(rstd.entry.tensor == "y.rstd");
  CHECK(rstd.verdict == Verdict::ill_conditioned_noise);
  CHECK(has(d.causes.front().evidence, "says " + std::string(verdict_name(rstd.verdict)) + " (" +
                                           rstd.why + ")"));
}
