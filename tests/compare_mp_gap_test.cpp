// The comparator at mp levels past the double range (compare.hpp): gaps and tolerances are
// Magnitudes, so a gap of 2^-3000 is measured and judged, where as doubles both it and its
// tolerance read 0 and every boundary would be `within`.
#include <catch2/catch.hpp>
#include <cmath>

#include "golden/golden_compare.hpp"
#include "io/tensor_file.hpp"
#include "core/io.hpp"
#include "core/mp.hpp"
#include "core/mp_exact.hpp"
#include "report/report.hpp"
#include "scenario/scenario.hpp"
#include "compare/compare-inl.hpp"

using namespace shardsim;

namespace {

// Restores the thread's mp precision when a test that changed it ends.
struct MpPrecisionGuard {
  unsigned saved = mp_significand_bits();
  ~MpPrecisionGuard() { set_mp_precision(saved); }
};

// One element's comparison at the mp precision in force: dense 1 and 0.5 against sharded
// 1 + 2^gap_log2 and 0.5 on one rank, with tolerance `rtol`. REQUIRES: -gap_log2 < the bits.
BoundaryResult judged(long gap_log2, const Magnitude& rtol) {
  const Shape shape({{"hidden", 2}});
  const Mp tiny = ldexp(Mp(1), static_cast<int>(gap_log2));
  const Tensor<Mp> dense(shape, {Mp(1), Mp(0.5)});
  DistTensor<Mp> sharded = make_dist<Mp>("y", shape, Placement::replicate(), 1);
  sharded.locals = {Tensor<Mp>(shape, {Mp(1) + tiny, Mp(0.5)})};
  TraceEntry entry;
  entry.tensor = "y";
  Comparator<Mp> compare(rtol);
  compare.on_boundary(entry, &dense, sharded);
  return compare.results().back();
}

// At mp4096 (1 + 2^-3000 needs 3001 bits).
BoundaryResult judged_at_2_pow_minus_3000(const Magnitude& rtol) { return judged(-3000, rtol); }

Scenario scenario_at(const std::string& file, const std::string& precision) {
  std::string text = read_file(std::string(SHARDSIM_SOURCE_DIR) + "/scenarios/" + file);
  const std::string from = "precisions = [\"f32\", \"f64\", \"mp256\"]";
  REQUIRE(text.find(from) != std::string::npos);
  text.replace(text.find(from), from.size(), "precisions = [\"" + precision + "\"]");
  return parse_scenario(text, file);
}

const BoundaryResult& boundary(const RunReport& report, const std::string& tensor) {
  for (const BoundaryResult& b : report.boundaries) {
    if (b.entry.tensor == tensor) return b;
  }
  FAIL("no boundary " << tensor);
  return report.boundaries.front();
}

}  // namespace

TEST_CASE("compare: a synthetic 2^-3000 gap is measured and judged exactly", "[compare][mp]") {
  MpPrecisionGuard guard;
  REQUIRE(set_mp_precision(4096) >= 4096);
  const Magnitude gap = Magnitude::scaled(1, -3000);
  REQUIRE(gap.to_double() == 0);  // what the double comparator saw: no gap at all
  // The default tolerance at mp4096: 2^(16 - 4096) = 2^-4080, far below the gap (scale 1).
  const Magnitude rtol = exact_default_rtol(parse_precision("mp4096"));
  CHECK(rtol == Magnitude::scaled(1, -4080));
  const BoundaryResult failing = judged_at_2_pow_minus_3000(rtol);
  CHECK(failing.status == Status::fail);
  CHECK(failing.max_abs == gap);  // |1 + 2^-3000 - 1|, exact
  CHECK(failing.max_rel == gap);  // over |d| = 1
  CHECK(failing.scale == Magnitude::of(1.0));
  CHECK(failing.rtol == rtol);
  REQUIRE(failing.first_bad);
  CHECK(failing.first_bad->reason == "outside tolerance");
  CHECK(failing.first_bad->index == std::vector<std::pair<std::string, std::int64_t>>{{"hidden", 0}});
  // The test is |s - d| <= rtol * scale: a tolerance of exactly 2^-3000 admits the gap, one a
  // single 53-bit step below it (2^-3000 * (1 - 2^-53)) does not, and 2^-2990 does.
  CHECK(judged_at_2_pow_minus_3000(gap).status == Status::within);
  CHECK(judged_at_2_pow_minus_3000(Magnitude::scaled(1 - 0x1p-53, -3000)).status == Status::fail);
  CHECK(judged_at_2_pow_minus_3000(*Magnitude::parse("2^-2990")).status == Status::within);

  // The same at the largest level, mp65536: a gap of 2^-65000 against the default 2^-65520.
  REQUIRE(set_mp_precision(kMaxMpBits) >= kMaxMpBits);
  const Magnitude top_rtol = exact_default_rtol(Precision{ScalarKind::mp, kMaxMpBits});
  CHECK(top_rtol == Magnitude::scaled(1, -65520));
  const BoundaryResult top = judged(-65000, top_rtol);
  CHECK(top.status == Status::fail);
  CHECK(top.max_abs == Magnitude::scaled(1, -65000));
  // The divergence prints both values with the digits it takes to tell them apart: 1 and
  // 1 + 2^-65000 first differ at digit 1 + 65000 log10(2) = 19567.9, so with 19568 digits
  // ("1.000...0" and "1.000...1", rounded), equal with one fewer.
  REQUIRE(top.first_bad);
  const std::string& dense_text = top.first_bad->dense_text;
  CHECK(dense_text != top.first_bad->sharded_text);
  const int digits = static_cast<int>(dense_text.find('e')) - 1;  // less the point
  CHECK(digits == 19568);
  CHECK(mp_decimal_text(Mp(1), digits - 1) ==
        mp_decimal_text(Mp(1) + ldexp(Mp(1), -65000), digits - 1));
  CHECK(judged(-65000, Magnitude::scaled(1, -65000)).status == Status::within);
}

TEST_CASE("compare: the default mp tolerance is 2^(16 - bits) at every level", "[compare][mp]") {
  // Where the double holds it (up to mp1090: 2^-1074 is the smallest double) it is default_rtol;
  // beyond, the exact power of two, which as a double would be 0.
  for (unsigned bits : {64u, 256u, 1024u, 1090u}) {
    const Precision p{ScalarKind::mp, bits};
    CHECK(exact_default_rtol(p) == Magnitude::of(default_rtol(p)));
  }
  CHECK(default_rtol(Precision{ScalarKind::mp, 2048}) == 0);
  CHECK(exact_default_rtol(Precision{ScalarKind::mp, 2048}) == Magnitude::scaled(1, -2032));
  CHECK(exact_default_rtol(Precision{ScalarKind::mp, kMaxMpBits}) ==
        Magnitude::scaled(1, 16 - static_cast<long>(kMaxMpBits)));
  CHECK(exact_default_rtol(parse_precision("f32")) == Magnitude::scaled(1, -8));
  CHECK(exact_default_rtol(parse_precision("f64")) == Magnitude::scaled(1, -37));
}

TEST_CASE("compare: ill-conditioned LayerNorm statistics fail at mp2048", "[compare][mp]") {
  MpPrecisionGuard guard;
  // norm_hidden_cancellation_ill_conditioned.toml: x ~ 1e4 +- 1 over hidden 18, stats sum_sumsq.
  // var = SS/H - mean^2 subtracts two numbers near 1e8 whose difference is ~1, so the rounding
  // of SS/H and sum/H (1/18 is no binary fraction: they round at every precision), about
  // 1e8 * 2^-2048 absolute, becomes a relative error of ~1e8 * 2^-2048 = 2^26.6 * 2^-2048 in var
  // and rstd, at every level. The tolerance is 2^(16 - 2048) relative: the gap is ~2^10 times
  // larger, ~2^26 ulp against the allowed 2^16. Before, both read 0 as doubles: `within`.
  const Scenario scenario = scenario_at("norm_hidden_cancellation_ill_conditioned.toml", "mp2048");
  const RunReport report = evaluate(scenario, parse_precision("mp2048"));
  CHECK_FALSE(report.pass);
  REQUIRE(report.first_divergence);
  CHECK(report.first_divergence->tensor == "y.rstd");
  CHECK(report.first_divergence->reason == "outside tolerance");
  const BoundaryResult& rstd = boundary(report, "y.rstd");
  CHECK(rstd.status == Status::fail);
  CHECK(rstd.rtol == Magnitude::scaled(1, -2032));
  const double log2_normwise = (rstd.max_abs / rstd.scale).log2();
  CHECK(log2_normwise > 26.6 - 2048 - 4);  // 2^26.6 * 2^-2048 within a factor 16 either way:
  CHECK(log2_normwise < 26.6 - 2048 + 4);  // the cancellation's size is known to a few bits
  CHECK(rstd.max_ulp > 0x1p16);            // counted in mp2048 ulps, a double all along
  // The report writes what a double cannot hold as 17-digit text: rtol 2^-2032 =
  // 2.02791062561264649...e-612 (Python: Decimal(2) ** -2032 at 40 digits).
  const std::string json = report_json(scenario, {report}, judge(scenario, {report}), Diagnosis{});
  CHECK(json.find("\"rtol\": \"2.0279106256126465e-612\"") != std::string::npos);
  CHECK(json.find("\"status\": \"fail\"") != std::string::npos);
}

TEST_CASE("compare: a correct program with reordered sums passes at mp2048", "[compare][mp]") {
  MpPrecisionGuard guard;
  // norm_hidden_sum_sumsq.toml (2 SGD steps): the statistics are summed per rank and then across
  // ranks, a reordering whose rounding moves values by a few units of 2^-2048 relative, well
  // within 2^(16 - 2048). Some boundaries are not exact, so the tolerance is not 0.
  const RunReport report =
      evaluate(scenario_at("norm_hidden_sum_sumsq.toml", "mp2048"), parse_precision("mp2048"));
  CHECK(report.pass);
  int within = 0;
  for (const BoundaryResult& b : report.boundaries) {
    if (b.status != Status::within) continue;
    ++within;
    INFO("#" << b.entry.id << " " << b.entry.tensor);
    CHECK_FALSE(b.max_abs.is_zero());
    CHECK((b.max_abs / b.scale).log2() < -2000);  // measured at mp2048's scale, not 0
  }
  CHECK(within > 0);
}

TEST_CASE("compare: a [tolerance] below the double range is written as a string",
          "[compare][mp][scenario]") {
  // "2^E" is exact; a literal is rounded to 53 bits: 1e-700 = 2^-2325.35 (700 * log2(10)).
  CHECK(*Magnitude::parse("2^-2000") == Magnitude::scaled(1, -2000));
  CHECK(*Magnitude::parse("0x1p-3000") == Magnitude::scaled(1, -3000));
  CHECK(Magnitude::parse("1e-700")->log2() == Approx(-700 * std::log2(10.0)).epsilon(1e-12));
  for (const char* bad : {"", "abc", "2^", "2^x", "2^-5.5", "-1e-5", "inf", "nan", "1e-700x"}) {
    INFO(bad);
    CHECK_FALSE(Magnitude::parse(bad));
  }
  MpPrecisionGuard guard;
  auto with_tolerance = [](const std::string& value) {
    std::string text = read_file(std::string(SHARDSIM_SOURCE_DIR) +
                                 "/scenarios/norm_hidden_cancellation_ill_conditioned.toml");
    return parse_scenario(text + "\n[tolerance]\nmp2048 = " + value + "\n", "t.toml");
  };
  // 2^-2000 is looser than the ill-conditioned gap, ~2^26.6 * 2^-2048 = 2^-2021.4 (see above):
  // with it the run passes at mp2048, so the string tolerance is the one applied.
  const Scenario loose = with_tolerance("\"2^-2000\"");
  CHECK(loose.rtol(parse_precision("mp2048")) == Magnitude::scaled(1, -2000));
  CHECK(evaluate(loose, parse_precision("mp2048")).pass);
  CHECK_THROWS_WITH(with_tolerance("1e-700"),
                    Catch::Contains("tolerance.mp2048") && Catch::Contains("reads as 0") &&
                        Catch::Contains("\"2^-2000\""));
  CHECK_THROWS_WITH(with_tolerance("\"2^0\""), Catch::Contains("must be in (0, 1)"));
  CHECK_THROWS_WITH(with_tolerance("\"tiny\""),
                    Catch::Contains("expected a number or a string such as"));
}

TEST_CASE("compare: golden comparison at the bottom of the double range has no false pass",
          "[compare]") {
  // Goldens and candidates are IEEE values read as doubles. Their difference is exact and
  // nonzero whenever they differ (gradual underflow), and atol + rtol * |g| can only underflow
  // toward 0, which makes the test stricter: no tiny gap passes for want of range.
  //   hidden=0: g = 2^-1074 (the smallest double), c = 0. rtol * |g| = 1e-7 * 2^-1074 rounds to
  //             0, so the gap 2^-1074 (1 ulp) is outside: strict, not lenient.
  //   hidden=1: g = 2^-1022, c = g + 2^-1074: relative 2^-52 < 1e-7, and 1e-7 * 2^-1022 ~ 2.2e-315
  //             (subnormal) > 2^-1074: within.
  //   hidden=2: equal.
  GoldenInfo info;
  info.name = "y";
  info.dtype = format::Dtype::f64;
  info.axes = {"hidden"};
  info.shape = {3};
  info.global_shape = Shape({{"hidden", 3}});
  info.layout = Layout({Placement::replicate()});
  GoldenDir golden;
  golden.precision = "mp2048";
  golden.infos = {info};
  golden.tensors.emplace("y", raw_f64("y", {3}, {0x1p-1074, 0x1p-1022, 1.0}));
  Candidate candidate;
  candidate.tensors = {raw_f64("y", {3}, {0.0, 0x1p-1022 + 0x1p-1074, 1.0})};
  CompareOptions options;
  options.rtol = 1e-7;
  options.atol = 0;
  const ComparisonReport report = compare_candidate(golden, candidate, options);
  REQUIRE(report.tensors.size() == 1);
  const TensorComparison& y = report.tensors.front();
  CHECK_FALSE(report.pass);
  CHECK(y.outside == 1);
  CHECK(y.max_abs == 0x1p-1074);
  REQUIRE(y.worst);
  CHECK(y.worst->index == std::vector<std::pair<std::string, std::int64_t>>{{"hidden", 0}});
}
