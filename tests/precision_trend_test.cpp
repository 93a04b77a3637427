// shardsim precision, the trend verdict on synthetic ladders: Magnitude arithmetic, the
// least-squares fit and the verdict rule (precision/trend_fit.hpp), each answer derived by hand
// in a comment, and the exact mp gap far below the double range.
#include <catch2/catch.hpp>
#include <cmath>
#include <string>

#include "precision/precision_diff.hpp"

using namespace shardsim;

namespace {

// A ladder from (bits, log2 gap) pairs; a gap given as nullopt is exact (0).
std::vector<LadderPoint> ladder(std::initializer_list<std::pair<unsigned, std::optional<double>>> levels) {
  std::vector<LadderPoint> out;
  for (const auto& [bits, log2_gap] : levels) {
    const std::string name = bits == 24 ? "f32" : bits == 53 ? "f64" : "mp" + std::to_string(bits);
    Magnitude gap;
    if (log2_gap) {
      const double whole = std::floor(*log2_gap);
      gap = Magnitude::scaled(std::exp2(*log2_gap - whole), static_cast<long>(whole));
    }
    out.push_back({name, bits, gap});
  }
  return out;
}

TrendVerdict judged(const std::vector<LadderPoint>& points) { return judge_trend(points, fit_trend(points)); }

bool says(const TrendVerdict& v, const std::string& text) { return v.why.find(text) != std::string::npos; }

}  // namespace

TEST_CASE("magnitude: mantissa and exponent survive below the double range", "[precision]") {
  const Magnitude tiny = Magnitude::scaled(1, -2048);
  CHECK(tiny.log2() == -2048);
  CHECK(tiny.to_double() == 0);  // as a double it underflows: the reason Magnitude exists
  CHECK(tiny.sci() == "3.09e-617");  // 2^-2048 = 3.0943e-617 (30-digit decimal expansion)
  CHECK(Magnitude::scaled(3, -2048) / Magnitude::scaled(1, -2046) == Magnitude::of(0.75));
  CHECK(tiny * Magnitude::scaled(1, 2048) == Magnitude::of(1));
  CHECK(tiny < Magnitude::scaled(1, -2047));
  CHECK(Magnitude() < tiny);
  CHECK(tiny < Magnitude::infinity());
  CHECK(max(tiny, Magnitude::nan()).is_nan());
  CHECK((Magnitude() / Magnitude()).is_zero());           // no gap over no scale
  CHECK(!(tiny / Magnitude()).is_finite());                // a gap over a zero scale
  CHECK(Magnitude::of(-0.375) == Magnitude::scaled(0.75, -1));
  CHECK(Magnitude::of(1e300).sci(16) == "1.0000000000000001e+300");  // the double's exact value
}

TEST_CASE("trend: a gap falling one bit per bit is noise, with its condition", "[precision]") {
  // kappa = 2^4 at every level: log2 g = 4 - bits, a line of slope exactly -1, intercept 4.
  const auto points = ladder({{24, -20.0}, {53, -49.0}, {128, -124.0}});
  const TrendFit fit = fit_trend(points);
  REQUIRE(fit.slope);
  CHECK(*fit.slope == -1);
  CHECK(*fit.intercept == 4);
  CHECK(fit.fitted == std::vector<std::size_t>{0, 1, 2});
  CHECK(fit.log2_condition == 4);
  CHECK(fit.condition_level == 1u);  // equal kappas: the lower median of three is the middle level
  const TrendVerdict v = judge_trend(points, fit);
  CHECK(v.verdict == Verdict::noise);
  CHECK(says(v, "slope -1.00 per bit over 3 levels; condition 2^4.0 (1.60e+01) at f64"));
}

TEST_CASE("trend: noise with condition above 2^20 is ill-conditioned", "[precision]") {
  // kappa = 2^26: log2 g = 26 - bits. At f32 the gap is 2^2 (saturated: g >= 1/2 has lost every
  // bit), so the condition comes from f64 and mp128 only, the lower median being f64's 2^26.
  const auto points = ladder({{24, 2.0}, {53, -27.0}, {128, -102.0}});
  const TrendFit fit = fit_trend(points);
  CHECK(*fit.slope == -1);
  CHECK(fit.condition_level == 1u);
  CHECK(fit.log2_condition == 26);
  const TrendVerdict v = judge_trend(points, fit);
  CHECK(v.verdict == Verdict::ill_conditioned_noise);
  CHECK(says(v, "condition 2^26.0 (6.71e+07) at f64 > 2^20"));  // 2^26 = 67108864
  // Condition exactly 2^20 is still plain noise (the threshold is strict).
  CHECK(judged(ladder({{24, -4.0}, {53, -33.0}, {128, -108.0}})).verdict == Verdict::noise);
}

TEST_CASE("trend: a flat gap is a bug", "[precision]") {
  // The same gap at every level: sxy = 0, slope 0.
  const auto points = ladder({{24, -10.0}, {53, -10.0}, {128, -10.0}});
  CHECK(*fit_trend(points).slope == 0);
  const TrendVerdict v = judged(points);
  CHECK(v.verdict == Verdict::bug);
  CHECK(says(v, "flat as precision grows: slope 0.00 per bit over 3 levels; 9.77e-04 normwise at mp128"));
  // A bug below f32's resolution: f32 shows rounding (2^-24), f64 and mp128 the bug (2^-40).
  // x = 24, 53, 128 (mean 205/3), y = -24, -40, -40 (mean -104/3): sxx = 17282/3,
  // sxy = -2128/3, slope = -2128/17282 = -0.1231: flat enough for a bug.
  const auto hidden = ladder({{24, -24.0}, {53, -40.0}, {128, -40.0}});
  CHECK(*fit_trend(hidden).slope == Approx(-2128.0 / 17282));
  CHECK(judged(hidden).verdict == Verdict::bug);
}

TEST_CASE("trend: exact levels are not fitted", "[precision]") {
  // f32 exact (in an f32 run a cast to float is the identity), then a flat 2^-30: a bug.
  const auto cast = ladder({{24, std::nullopt}, {53, -30.0}, {128, -30.0}});
  CHECK(fit_trend(cast).fitted == std::vector<std::size_t>{1, 2});
  CHECK(judged(cast).verdict == Verdict::bug);
  // f64 exact by luck between two levels on the slope -1 line (kappa 2^4): slope
  // (-124 + 20) / (128 - 24) = -1 from the other two, noise.
  const auto lucky = ladder({{24, -20.0}, {53, std::nullopt}, {128, -124.0}});
  CHECK(*fit_trend(lucky).slope == -1);
  CHECK(judged(lucky).verdict == Verdict::noise);
  // The gap vanishes at the top: whatever the slope below, a bug would still show there.
  const auto vanishing = ladder({{24, -10.0}, {53, -10.0}, {128, std::nullopt}});
  const TrendVerdict v = judged(vanishing);
  CHECK(fit_trend(vanishing).vanishes);
  CHECK(v.verdict == Verdict::noise);
  CHECK(says(v, "exact from mp128 up; slope 0.00 per bit over 2 levels"));
  CHECK(says(judged(ladder({{24, -20.0}, {53, std::nullopt}, {128, std::nullopt}})), "exact from f64 up"));
  // A gap at the top level only: noise when within 2^4 rounding units of that level (here
  // 2^-127 * 2^128 = 2), undetermined otherwise (here 2^-100 * 2^128 = 2^28).
  CHECK(judged(ladder({{24, std::nullopt}, {53, std::nullopt}, {128, -127.0}})).verdict == Verdict::noise);
  CHECK(judged(ladder({{24, std::nullopt}, {53, std::nullopt}, {128, -100.0}})).verdict == Verdict::undetermined);
}

TEST_CASE("trend: a gap below the level's resolution is fitted and does not flip noise", "[precision]") {
  // f64's gap is 2^-60 < 2^-53 (only small elements differ there): kappa 2^-7. Fitted with the
  // others: x = 24, 53, 128 (mean 205/3), y = -20, -60, -124 (mean -68): sxx = 17282/3,
  // sxy = -16776/3, slope = -16776/17282 = -0.9707. The kappas are 2^4, 2^-7, 2^4: the lower
  // median is f32's 2^4 (the stable order keeps f32 before mp128), not the outlier.
  const auto points = ladder({{24, -20.0}, {53, -60.0}, {128, -124.0}});
  const TrendFit fit = fit_trend(points);
  CHECK(*fit.slope == Approx(-16776.0 / 17282));
  CHECK(fit.condition_level == 0u);
  CHECK(fit.log2_condition == 4);
  CHECK(judged(points).verdict == Verdict::noise);
}

TEST_CASE("trend: one level off by 2^10 does not flip the verdict", "[precision]") {
  // x = 24, 53, 128, 257: mean 115.5, sxx = 91.5^2 + 62.5^2 + 12.5^2 + 141.5^2 = 32457. Moving
  // one level's log2 gap by d moves the slope by d * (x - 115.5) / 32457; the most, at the top:
  // 10 * 141.5 / 32457 = 0.0436.
  const auto noise_high = ladder({{24, -20.0}, {53, -49.0}, {128, -124.0}, {257, -253.0 + 10}});
  CHECK(*fit_trend(noise_high).slope == Approx(-1 + 10 * 141.5 / 32457));
  CHECK(judged(noise_high).verdict == Verdict::noise);
  const auto flat_low = ladder({{24, -10.0}, {53, -10.0}, {128, -10.0}, {257, -20.0}});
  CHECK(*fit_trend(flat_low).slope == Approx(-10 * 141.5 / 32457));
  CHECK(judged(flat_low).verdict == Verdict::bug);
}

TEST_CASE("trend: fewer than three levels cannot read a trend", "[precision]") {
  const TrendVerdict two = judged(ladder({{24, -20.0}, {53, -49.0}}));
  CHECK(two.verdict == Verdict::undetermined);
  CHECK(says(two, "2 levels: a trend needs at least 3 (gap f32 9.54e-07, f64 1.78e-15)"));
  CHECK(judged(ladder({{24, -10.0}, {53, -10.0}})).verdict == Verdict::undetermined);
  CHECK(judged(ladder({{257, -10.0}})).verdict == Verdict::undetermined);
}

TEST_CASE("trend: no level with a gap is noise, not an abort", "[precision]") {
  // -0 against +0 is not bitwise equal but measures no gap at any level.
  const auto zeros = ladder({{24, std::nullopt}, {53, std::nullopt}, {128, std::nullopt}});
  CHECK(fit_trend(zeros).fitted.empty());
  CHECK(judged(zeros).verdict == Verdict::noise);
}

TEST_CASE("trend: the definite rules come before the trend", "[precision]") {
  const std::vector<Precision> lv = {parse_precision("f32"), parse_precision("f64"), parse_precision("mp256")};
  const std::vector<unsigned> bits = {24, 53, 257};
  auto gap = [](Status status, double normwise) {
    LevelGap g;
    g.status = status;
    g.max_abs = g.normwise = Magnitude::of(normwise);
    return g;
  };
  auto judge = [&](std::vector<LevelGap> gaps, bool claimed = false) {
    BoundaryDiff b;
    for (LevelGap& g : gaps) g.exact_claimed = claimed;
    b.gap = std::move(gaps);
    detail::judge_boundary(b, lv, bits);
    return b;
  };
  const LevelGap exact = gap(Status::exact, 0);
  CHECK(judge({exact, exact, exact}).verdict == Verdict::exact);
  CHECK(judge({LevelGap{}, LevelGap{}, LevelGap{}}).verdict == Verdict::not_applicable);
  // A boundary that claims exactness must be bitwise equal at every level, whatever the trend.
  const BoundaryDiff claimed = judge({gap(Status::within, 0x1p-24), exact, exact}, true);
  CHECK(claimed.verdict == Verdict::bug);
  CHECK(claimed.why == "claims exactness but is not bitwise equal at f32");
  // A sharded value that is not finite where the oracle is: a range bug, though wider levels agree.
  const BoundaryDiff overflow = judge({gap(Status::fail, INFINITY), exact, exact});
  CHECK(overflow.verdict == Verdict::bug);
  CHECK(overflow.why.find("not finite at f32") == 0);
  // Otherwise the trend decides: 2^-20, 2^-49, 2^-253 on the slope -1 line of kappa 2^4.
  const BoundaryDiff noise = judge({gap(Status::within, 0x1p-20), gap(Status::within, 0x1p-49),
                                    gap(Status::within, 0x1p-253)});
  CHECK(noise.verdict == Verdict::noise);
  CHECK(*noise.trend.slope == -1);
}

TEST_CASE("trend: the exact mp gap keeps 2^-2100", "[precision]") {
  // Dense 1; one rank holds 1 + 2^-2100 (2101 bits: 525 hex digits after the point, the last a 1).
  const std::string one = "0x1p+0";
  const std::string above = "0x1." + std::string(524, '0') + "1p+0";
  CapturedBoundary c;
  c.has_dense = true;
  c.dense.exact = {one};
  c.ranks.resize(2);
  c.ranks[0].exact = {above};
  LevelGap g = detail::mp_exact_gap(c, {{0, {{0, 0}}}}, 2200);
  CHECK(g.max_abs == Magnitude::scaled(1, -2100));
  CHECK(g.normwise.log2() == -2100);  // 2^-2100 = 6.87e-633: as a double it would read 0
  CHECK(g.max_rel == Magnitude::scaled(1, -2100));
  // A Partial pair (1, 2^-2100) summed at the level's bits: exact at 2200 bits (2^-2100 gap),
  // rounded back to 1 at 2000 bits (no gap).
  c.ranks[0].exact = {one};
  c.ranks[1].exact = {"0x1p-2100"};
  CHECK(detail::mp_exact_gap(c, {{0, {{0, 0}, {1, 0}}}}, 2200).normwise == Magnitude::scaled(1, -2100));
  CHECK(detail::mp_exact_gap(c, {{0, {{0, 0}, {1, 0}}}}, 2000).normwise.is_zero());
}
