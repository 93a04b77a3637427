// The dd and qd scalars (qd.hpp, qd_exact.hpp): parsing, correct rounding of the whole expansion,
// erf against MPFR at 320 bits, non-finite values, and the near-midpoint flags of goldens.
#include "core/qd.hpp"

#include <mpfr.h>

#include <array>
#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <random>

#include "cli_test_support.hpp"
#include "compare/compare.hpp"
#include "golden/golden_set.hpp"
#include "precision/precision_diff.hpp"
#include "core/qd_exact.hpp"

using namespace shardsim;

namespace {

// An MPFR value that cleans up after itself.
struct Big {
  mpfr_t v;
  explicit Big(mpfr_prec_t bits) { mpfr_init2(v, bits); }
  ~Big() { mpfr_clear(v); }
  Big(const Big&) = delete;
  Big& operator=(const Big&) = delete;
};

// The exact sum of a qd value's terms rounded once by MPFR to `bits` (the independent reference).
double mpfr_rounded(const Qd& value, mpfr_prec_t bits) {
  Big sum(bits);
  std::array<Big, 4> t{Big(53), Big(53), Big(53), Big(53)};
  std::array<mpfr_ptr, 4> p{};
  for (int i = 0; i < 4; ++i) {
    mpfr_set_d(t[static_cast<std::size_t>(i)].v, value.term(i), MPFR_RNDN);
    p[static_cast<std::size_t>(i)] = t[static_cast<std::size_t>(i)].v;
  }
  mpfr_sum(sum.v, p.data(), 4, MPFR_RNDN);
  return mpfr_get_d(sum.v, MPFR_RNDN);  // exact: at most 53 bits
}

Qd random_qd(std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(-4, 4);
  // Products and quotients of random doubles fill all four terms.
  Qd v = Qd(u(rng)) * Qd(u(rng)) / Qd(u(rng) + 5.0);
  return v * Qd(std::ldexp(1.0, static_cast<int>(rng() % 40) - 20));
}

}  // namespace

TEST_CASE("qd: dd and qd parse as precisions with 106 and 212 bits", "[qd]") {
  CHECK(parse_precision("dd") == Precision{ScalarKind::dd, 106});
  CHECK(parse_precision("qd") == Precision{ScalarKind::qd, 212});
  CHECK(parse_precision("qd").name() == "qd");
  CHECK(parse_precision("dd").has_exact_values());
  CHECK_FALSE(parse_precision("qd").is_narrow());
  CHECK(default_rtol(parse_precision("qd")) == std::ldexp(1.0, 16 - 212));
}

TEST_CASE("qd: rounding to f64, f32, bf16, f16 rounds the whole sum, as MPFR does", "[qd]") {
  // Constructed ties: 1 + 2^-53 is the midpoint of 1 and 1 + 2^-52 (f64 ulp 2^-52). The third
  // term decides; x0 alone (1) or x0 + x1 rounded (1, ties to even) would be wrong for a positive
  // tail. Likewise 1 + 2^-24 for f32 (ulp 2^-23), 1 + 2^-8 for bf16, 1 + 2^-11 for f16.
  const Qd above(qd_real(1.0, 0x1p-53, 0x1p-120, 0));
  const Qd below(qd_real(1.0, 0x1p-53, -0x1p-120, 0));
  const Qd tie(qd_real(1.0, 0x1p-53, 0, 0));
  const Qd odd_tie(qd_real(1.0 + 0x1p-52, 0x1p-53, 0, 0));
  CHECK(round_to_f64(above) == 1.0 + 0x1p-52);
  CHECK(round_to_f64(below) == 1.0);
  CHECK(round_to_f64(tie) == 1.0);                // to even
  CHECK(round_to_f64(odd_tie) == 1.0 + 0x1p-51);  // to even, upward
  CHECK(round_to_f32(Qd(qd_real(1.0 + 0x1p-24, 0x1p-90, 0, 0))) == 1.0f + 0x1p-23f);
  CHECK(round_to_f32(Qd(qd_real(1.0 + 0x1p-24, -0x1p-90, 0, 0))) == 1.0f);
  CHECK(round_to_f32(Qd(qd_real(1.0 + 0x1p-24, 0, 0, 0))) == 1.0f);
  CHECK(round_to_narrow(Qd(qd_real(1.0 + 0x1p-8, 0x1p-70, 0, 0)), NarrowFormat::bf16) == 0x3f81);
  CHECK(round_to_narrow(Qd(qd_real(1.0 + 0x1p-8, -0x1p-70, 0, 0)), NarrowFormat::bf16) == 0x3f80);
  CHECK(round_to_narrow(Qd(qd_real(1.0 + 0x1p-11, 0x1p-70, 0, 0)), NarrowFormat::f16) == 0x3c01);
  CHECK(round_to_narrow(Qd(qd_real(1.0 + 0x1p-11, 0, 0, 0)), NarrowFormat::f16) == 0x3c00);
  // A zero keeps its sign in every format (summing -0 + 0 + 0 + 0 would give +0): goldens store
  // it, as rounding MPFR's -0 does.
  CHECK(std::signbit(round_to_f64(Qd(-0.0))));
  CHECK(std::signbit(round_to_f32(Qd(-0.0))));
  CHECK(round_to_narrow(Qd(-0.0), NarrowFormat::bf16) == 0x8000);
  CHECK(round_to_narrow(Qd(-0.0), NarrowFormat::f16) == 0x8000);
  CHECK(std::signbit(round_to_f64(Dd(-0.0))));
  CHECK_FALSE(std::signbit(round_to_f64(Qd(0.0))));
  CHECK(round_to_narrow(Qd(0.0), NarrowFormat::bf16) == 0x0000);
  // A value whose terms overlap (not QD-normalized) takes the MPFR path and is still right.
  CHECK(round_to_f64(Qd(qd_real(1.0, 1.0, 0x1p-60, 0))) == 2.0);

  std::mt19937_64 rng(20261201);
  int mismatches = 0;
  for (int i = 0; i < 200000; ++i) {
    Qd v = random_qd(rng);
    if (i % 4 == 1) {
      // Land on a midpoint of f64 or f32 and perturb below the second term: the tie cases.
      const double f = round_to_f64(v);
      const double half = (std::nextafter(f, INFINITY) - f) / 2;
      v = Qd(f) + Qd(half) + Qd(std::ldexp(v.term(2), -(i % 7)) * (i % 3 - 1));
    } else if (i % 4 == 2) {
      const float f = round_to_f32(v);
      const double half = (static_cast<double>(std::nextafter(f, INFINITY)) - f) / 2;
      v = Qd(static_cast<double>(f)) + Qd(half) + Qd(v.term(3) * (i % 3 - 1));
    }
    mismatches += round_to_f64(v) != mpfr_rounded(v, 53);
    mismatches += static_cast<double>(round_to_f32(v)) != mpfr_rounded(v, 24);
    mismatches += narrow_to_float(NarrowFormat::bf16, round_to_narrow(v, NarrowFormat::bf16)) !=
                  mpfr_rounded(v, 8);
    const Dd d(dd_real(v.term(0), v.term(1)));
    mismatches += round_to_f64(d) != mpfr_rounded(Qd(qd_real(d.term(0), d.term(1), 0, 0)), 53);
  }
  CHECK(mismatches == 0);
}

TEST_CASE("qd: erf agrees with MPFR at 320 bits to 2^-199 (qd) and 2^-93 (dd)", "[qd]") {
  // qd.cpp derives the bound 2^13 u (u = 2^-212, 2^-106). Points: a grid over [-14, 14] with
  // irrational spacing, tiny arguments, and the series' cut at 13.
  std::vector<double> points;
  for (int i = -4000; i <= 4000; ++i) points.push_back(i * 0.0034951);
  for (int e = -300; e <= 0; e += 13) points.push_back(std::ldexp(1.2345, e));
  points.insert(points.end(), {12.999999, 13.0, 13.5, -12.75, 0.5, 1.0, 2.0, 3.0});
  Big x(320), want(320), got(320), err(320);
  double worst_qd = 0, worst_dd = 0;
  for (double p : points) {
    // A qd argument with all four terms: p (1 + 1/3 * 2^-60).
    const Qd arg = Qd(p) + Qd(p) * (Qd(1) / Qd(3)) * Qd(0x1p-60);
    mpfr_set_str(x.v, expansion_exact_text(arg).c_str(), 0, MPFR_RNDN);
    mpfr_erf(want.v, x.v, MPFR_RNDN);
    mpfr_set_str(got.v, expansion_exact_text(erf(arg)).c_str(), 0, MPFR_RNDN);
    mpfr_sub(err.v, got.v, want.v, MPFR_RNDN);
    mpfr_div(err.v, err.v, want.v, MPFR_RNDN);
    if (!mpfr_zero_p(want.v))
      worst_qd = std::max(worst_qd, std::fabs(mpfr_get_d(err.v, MPFR_RNDN)));

    const Dd darg = Dd(p) + Dd(p) * Dd(1.0 / 3) * Dd(0x1p-60);
    mpfr_set_str(x.v, expansion_exact_text(darg).c_str(), 0, MPFR_RNDN);
    mpfr_erf(want.v, x.v, MPFR_RNDN);
    mpfr_set_str(got.v, expansion_exact_text(erf(darg)).c_str(), 0, MPFR_RNDN);
    mpfr_sub(err.v, got.v, want.v, MPFR_RNDN);
    mpfr_div(err.v, err.v, want.v, MPFR_RNDN);
    if (!mpfr_zero_p(want.v))
      worst_dd = std::max(worst_dd, std::fabs(mpfr_get_d(err.v, MPFR_RNDN)));
  }
  INFO("worst relative error: qd 2^" << std::log2(worst_qd) << ", dd 2^" << std::log2(worst_dd));
  CHECK(worst_qd <= 0x1p-199);
  CHECK(worst_dd <= 0x1p-93);
  CHECK(erf(Qd(0.0)) == Qd(0.0));
  CHECK(signbit(erf(Qd(-0.0))));
  CHECK(erf(Qd(-INFINITY)) == Qd(-1));
  CHECK(isnan(erf(Qd(NAN))));
}

// Dekker's exact product as QD computes it without an FMA hook (inline.h): split each factor at
// 27 bits (scaled by 2^-28 above 2^996), then four products. The textbook algorithm, for the
// comparison below.
namespace {
void dekker_split(double a, double& hi, double& lo) {
  const bool big = std::fabs(a) > 0x1p996;
  if (big) a *= 0x1p-28;
  const double t = 134217729.0 * a;  // 2^27 + 1
  hi = t - (t - a);
  lo = a - hi;
  if (big) {
    hi *= 0x1p28;
    lo *= 0x1p28;
  }
}
double dekker_error(double a, double b, double p) {
  double ah = 0, al = 0, bh = 0, bl = 0;
  dekker_split(a, ah, al);
  dekker_split(b, bh, bl);
  return ((ah * bh - p) + ah * bl + al * bh) + al * bl;
}
}  // namespace

TEST_CASE("qd: two_prod's error term through fma is Dekker's, the exact remainder", "[qd]") {
  // qd.hpp routes QD's two_prod through fma(a, b, -p) (QD_FMS). Where a b - p is representable
  // (products above 2^-969), both ways give it exactly: the same bits, and p + e = a b exactly
  // (MPFR at 106 bits holds every product of two doubles).
#ifndef QD_FMS
  FAIL("qd.hpp no longer defines QD_FMS: this test would compare Dekker's with itself");
#endif
  std::mt19937_64 rng(20261202);
  std::uniform_real_distribution<double> mantissa(1.0, 2.0);
  std::uniform_int_distribution<int> exponent(-480, 480);
  Big exact(106), rest(106);
  for (int i = 0; i < 20000; ++i) {
    double a = std::ldexp(mantissa(rng), exponent(rng)) * (i % 2 ? -1 : 1);
    double b = std::ldexp(mantissa(rng), exponent(rng));
    if (i % 100 == 0) {  // Dekker's scaled path: a factor above 2^996
      a = std::ldexp(mantissa(rng), 1000);
      b = std::ldexp(mantissa(rng), -900);
    }
    double e = 0;
    const double p = qd::two_prod(a, b, e);
    INFO(a << " * " << b);
    REQUIRE(p == a * b);
    REQUIRE(std::bit_cast<std::uint64_t>(e) == std::bit_cast<std::uint64_t>(dekker_error(a, b, p)));
    mpfr_set_d(exact.v, a, MPFR_RNDN);
    mpfr_mul_d(exact.v, exact.v, b, MPFR_RNDN);  // exact: 106 bits
    mpfr_sub_d(rest.v, exact.v, p, MPFR_RNDN);   // exact: the remainder fits
    REQUIRE(mpfr_cmp_d(rest.v, e) == 0);
  }
}

TEST_CASE("qd: infinities and domain errors follow IEEE, not QD's NaNs", "[qd]") {
  const Qd inf = std::numeric_limits<Qd>::infinity();
  CHECK(-inf + Qd(1) == -inf);  // the attention kernels' running max starts at -inf
  CHECK(-inf < Qd(-1e300));
  CHECK(exp(-inf) == Qd(0));
  CHECK(exp(Qd(-inf) - Qd(1)) == Qd(0));
  CHECK(log(Qd(0)) == -inf);
  CHECK(isnan(log(Qd(-1))));
  CHECK(isnan(sqrt(Qd(-1))));
  CHECK(sqrt(Qd(0)) == Qd(0));
  CHECK(tanh(Qd(1000)) == Qd(1));
  CHECK(tanh(Qd(-400)) == Qd(-1));
  CHECK(isnan(Qd(0) / Qd(0)));
  CHECK(Qd(1) / Qd(0) == inf);
  CHECK(isnan(inf - inf));
  // Signed zeros as IEEE (MPFR) gives them: golden bytes of -0 and +0 differ.
  CHECK(signbit(Qd(-0.0) * Qd(1)));
  CHECK(signbit(Qd(0.0) * Qd(-3)));
  CHECK(signbit(Qd(-0.0) / Qd(2)));
  CHECK(signbit(Qd(-0.0) + Qd(-0.0)));
  CHECK_FALSE(signbit(Qd(1) - Qd(1)));
  CHECK(signbit(Dd(-0.0) * Dd(5)));
}

TEST_CASE("qd: values within the error budget of a rounding midpoint are flagged", "[qd]") {
  // 1 + 2^-53 is an f64 midpoint: flagged at distance 0 and at 2^-160 (inside qd's budget of
  // 2^-150 relative), not at 2^-140. 1 + 2^-24 is an f32 midpoint but an f64 value.
  CHECK(near_midpoint_flags(Qd(qd_real(1.0, 0x1p-53, 0, 0))) == kNearF64);
  CHECK(near_midpoint_flags(Qd(qd_real(1.0, 0x1p-53, 0x1p-160, 0))) == kNearF64);
  CHECK(near_midpoint_flags(Qd(qd_real(1.0, 0x1p-53, 0x1p-140, 0))) == 0);
  CHECK(near_midpoint_flags(Qd(qd_real(1.0 + 0x1p-24, 0, 0, 0))) == kNearF32);
  CHECK(near_midpoint_flags(Qd(qd_real(1.0 + 0x1p-8, 0, 0, 0))) == kNearBf16);  // f32 value
  CHECK(near_midpoint_flags(Qd(0.1)) == 0);
  // dd's budget is 2^-76: 1 + 2^-53 + 2^-80 is flagged at dd, not at qd.
  CHECK(near_midpoint_flags(Dd(dd_real(1.0 + 0x1p-52, 0x1p-53 + 0x1p-80))) == kNearF64);
  CHECK(near_midpoint_flags(Qd(qd_real(1.0 + 0x1p-52, 0x1p-53, 0x1p-80, 0))) == 0);
}

namespace {

// y = x w^T + b with x = 1 (hidden = 1), w = 1 and b = 2^-24, column-parallel over 2 ranks (w and
// b Shard(ffn), x Replicate): every y is 1 + 2^-24 exactly, the midpoint of the f32 values 1 and
// 1 + 2^-23 (inputs are drawn as f32 values, so the midpoint has to be computed). Exact in qd and
// mp256 alike, both round to even (1), but the qd reference cannot know that an exact
// computation would not land a hair above: it flags them.
const std::string kMidpoint = R"toml(name = "midpoint"
precisions = ["qd"]
[mesh]
ranks = 2

[[tensors]]
name = "x"
axes = ["seq", "hidden"]
shape = [1, 1]
init = { dist = "constant", value = 1.0 }
placement = "Replicate"

[[tensors]]
name = "w"
axes = ["ffn", "hidden"]
shape = [4, 1]
role = "parameter"
init = { dist = "constant", value = 1.0 }
placement = "Shard(ffn)"

[[tensors]]
name = "b"
axes = ["ffn"]
shape = [4]
role = "parameter"
init = { dist = "constant", value = 5.9604644775390625e-08 }
placement = "Shard(ffn)"

[[steps]]
op = "linear"
input = "x"
weight = "w"
bias = "b"
output = "y"
)toml";

}  // namespace

TEST_CASE("qd: goldens near an f32 midpoint are reported in the manifest and on stderr", "[qd]") {
  const Scenario scenario = parse_scenario(kMidpoint, "midpoint.toml");
  RunOptions options;
  options.capture_tensors = true;
  const RunReport run = evaluate(scenario, parse_precision("qd"), options);
  const GoldenSet set = build_goldens(scenario, run, GoldenOptions{});
  int flagged_f32 = 0, flagged_f64 = 0;
  for (const GoldenEntry& e : set.entries) {
    if (e.tensor.name == "f32/s1/c1/y") {
      CHECK(e.near_midpoint == 4);
      CHECK(e.first_near_midpoint == 0);
      CHECK(e.tensor.bytes == std::string("\0\0\x80\x3f\0\0\x80\x3f\0\0\x80\x3f\0\0\x80\x3f", 16));
    }
    if (e.near_midpoint > 0) (e.tensor.name.starts_with("f32/") ? flagged_f32 : flagged_f64)++;
  }
  CHECK(flagged_f32 > 0);
  CHECK(flagged_f64 == 0);
  CHECK(set.manifest.find("\"near_midpoint\"") != std::string::npos);
  REQUIRE_FALSE(set.warnings.empty());

  cli_test::TempDir dir;
  const auto path = dir.write("midpoint.toml", kMidpoint);
  const auto result = cli_test::run_cli("run --quiet " + cli_test::q(path) + " --golden " +
                                        cli_test::q(dir.path() / "g") + " --reference qd");
  CHECK(result.exit_code == 0);
  CHECK(result.err.find("warning: golden f32/s1/c1/y: 4 value(s) within the qd error budget") !=
        std::string::npos);
  // The mp256 reference rounds the same exact values the same way, and says nothing.
  const auto mp = cli_test::run_cli("run --quiet " + cli_test::q(path) + " --golden " +
                                    cli_test::q(dir.path() / "m") + " --reference mp256");
  CHECK(mp.exit_code == 0);
  CHECK(mp.err.empty());
}

TEST_CASE("qd: dd and qd sit on the precision ladder at 106 and 212 bits", "[qd][precision]") {
  // var = SS/H - mean^2 with mean 1e4 and std 1 cancels log2(1e8) = 26.58 bits (see
  // precision_ladder_test.cpp): the gap falls like 2^-bits at every level, dd and qd included,
  // so the fit over f32, f64, dd, qd, mp256 has slope -1 and condition ~2^26.6.
  const Scenario scenario =
      load_scenario(std::string(SHARDSIM_SOURCE_DIR) +
                    "/scenarios/norm_hidden_cancellation_ill_conditioned.toml");
  std::vector<Precision> levels;
  for (const char* n : {"f32", "f64", "dd", "qd", "mp256"}) levels.push_back(parse_precision(n));
  const PrecisionDiff diff = precision_diff(scenario, {levels, {}, {}});
  CHECK(diff.significand_bits == std::vector<unsigned>{24, 53, 106, 212, 257});
  const auto found = find_boundary(diff, "y.rstd");
  REQUIRE(found);
  const BoundaryDiff& b = diff.boundaries[*found];
  INFO(b.why);
  CHECK(b.verdict == Verdict::ill_conditioned_noise);
  REQUIRE(b.trend.slope);
  CHECK(*b.trend.slope == Approx(-1).margin(0.03));
  CHECK(b.trend.log2_condition == Approx(26.58).margin(1.5));
}

TEST_CASE("qd: bundled scenarios replay at dd and qd", "[qd]") {
  // Attention (RoPE's sin/cos and pow, exp, the -inf running max), the MLP block (GELU),
  // LayerNorm training (sqrt), the ring and all-gather plans' bitwise claims, faults caught.
  for (const char* name :
       {"attention_train_sgd_ring.toml", "attention_sequence_sharded_allgather.toml",
        "mlp_tensor_parallel.toml", "layernorm_train_sequence_sharded.toml",
        "faults/norm_combine_token_means.toml"}) {
    const auto result = cli_test::run_cli(
        "run --quiet " + cli_test::q(cli_test::source_scenario(name)) + " --precision dd,qd");
    INFO(name << ": " << result.err);
    CHECK(result.exit_code == 0);
  }
}

TEST_CASE("qd: erf GELU replays at qd, and its goldens equal mp256's", "[qd]") {
  // The bundled MLP scenarios use the tanh GELU; this is mlp_tensor_parallel with the exact
  // (erf) one, so the erf of qd.cpp runs inside a real plan, forward and backward.
  const std::string text =
      cli_test::replaced(cli_test::slurp(cli_test::source_scenario("mlp_tensor_parallel.toml")),
                         "approximate = \"tanh\"", "approximate = \"none\"");
  REQUIRE(text.find("approximate = \"none\"") != std::string::npos);
  cli_test::TempDir dir;
  const auto path = dir.write("mlp_erf.toml", text);
  const auto run = cli_test::run_cli("run --quiet " + cli_test::q(path) + " --precision dd,qd");
  INFO(run.err);
  CHECK(run.exit_code == 0);
  const std::string identity =
      "/usr/bin/python3 " +
      cli_test::q(std::filesystem::path(SHARDSIM_SOURCE_DIR) / "tools/qd_identity") + " " +
      cli_test::q(SHARDSIM_BINARY) + " " + cli_test::q(path);
  CHECK(std::system((identity + " > /dev/null").c_str()) == 0);
}
