// Tests for scalar.hpp and mp.hpp: precision names, ULP distance, and correct (single) rounding
// of mp values to f32 and f64.
#include "core/scalar.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <string>

#include "core/error.hpp"
#include "core/mp.hpp"

using shardsim::InputError;
using shardsim::kUlpNaN;
using shardsim::Mp;
using shardsim::parse_precision;
using shardsim::round_to_f64;
using shardsim::ScalarKind;
using shardsim::set_mp_precision;
using shardsim::ulp_distance;

TEST_CASE("parse_precision accepts f32, f64 and mp<bits> with 64 <= bits", "[scalar]") {
  CHECK(parse_precision("f32").kind == ScalarKind::f32);
  CHECK(parse_precision("f32").bits == 24);
  CHECK(parse_precision("f64").kind == ScalarKind::f64);
  CHECK(parse_precision("f64").bits == 53);
  CHECK(parse_precision("mp64").kind == ScalarKind::mp);
  CHECK(parse_precision("mp64").bits == 64);
  CHECK(parse_precision("mp256").bits == 256);
  // name() is the inverse of parsing.
  for (const char* text : {"f32", "f64", "mp64", "mp256", "mp65536"}) {
    CHECK(parse_precision(text).name() == text);
  }
}

TEST_CASE("parse_precision rejects malformed or out-of-range levels with InputError", "[scalar]") {
  // mp7 and mp63 are below kMinMpBits = 64; mp65537 is above kMaxMpBits.
  for (const char* text :
       {"mp7", "mp63", "mp65537", "f16x", "mp", "mp256x", "", "F32", "mp-64", "f64 "}) {
    INFO("text = '" << text << "'");
    CHECK_THROWS_AS(parse_precision(text), InputError);
  }
  // The message names the offending text so the CLI error is actionable.
  CHECK_THROWS_WITH(parse_precision("mp7"), Catch::Contains("'mp7'"));
}

TEST_CASE("ulp_distance on float: signed zeros, neighbours, across zero, NaN", "[scalar]") {
  const float denorm = std::numeric_limits<float>::denorm_min();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(ulp_distance(0.0f, -0.0f) == 0);
  CHECK(ulp_distance(1.0f, 1.0f) == 0);
  for (float x : {1.0f, -1.0f, 0.1f, 3.0e38f, -2.5e-38f, denorm}) {
    INFO("x = " << x);
    CHECK(ulp_distance(x, std::nextafter(x, inf)) == 1);
    CHECK(ulp_distance(std::nextafter(x, -inf), x) == 1);
    // Two steps apart is distance 2, in either argument order.
    const float up2 = std::nextafter(std::nextafter(x, inf), inf);
    CHECK(ulp_distance(x, up2) == 2);
    CHECK(ulp_distance(up2, x) == 2);
  }
  // -denorm_min, (±0), +denorm_min: the two zeros are one point, so the distance is 2.
  CHECK(ulp_distance(-denorm, denorm) == 2);
  CHECK(ulp_distance(-denorm, 0.0f) == 1);
  CHECK(ulp_distance(-0.0f, denorm) == 1);
  // The largest float and infinity are neighbours.
  CHECK(ulp_distance(std::numeric_limits<float>::max(), inf) == 1);
  // 1 and 2 are 2^23 floats apart (one binade).
  CHECK(ulp_distance(1.0f, 2.0f) == (1u << 23));
  CHECK(ulp_distance(nan, 1.0f) == kUlpNaN);
  CHECK(ulp_distance(1.0f, nan) == kUlpNaN);
  CHECK(ulp_distance(nan, nan) == kUlpNaN);
}

TEST_CASE("ulp_distance on double: signed zeros, neighbours, across zero, NaN", "[scalar]") {
  const double denorm = std::numeric_limits<double>::denorm_min();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  CHECK(ulp_distance(0.0, -0.0) == 0);
  for (double x : {1.0, -1.0, 0.1, 1.0e308, -2.5e-308, denorm}) {
    INFO("x = " << x);
    CHECK(ulp_distance(x, std::nextafter(x, inf)) == 1);
    CHECK(ulp_distance(std::nextafter(x, -inf), x) == 1);
  }
  CHECK(ulp_distance(-denorm, denorm) == 2);
  CHECK(ulp_distance(1.0, 2.0) == (std::uint64_t{1} << 52));
  // Extremes: -inf to +inf counts every finite double plus both infinities, minus the
  // doubled zero: 2 * 0x7ff0000000000000.
  CHECK(ulp_distance(-inf, inf) == 2 * std::uint64_t{0x7ff0000000000000});
  CHECK(ulp_distance(nan, 0.0) == kUlpNaN);
  CHECK(ulp_distance(0.0, nan) == kUlpNaN);
}

TEST_CASE("ScalarTraits::identical is bitwise: -0 != +0, NaN never identical", "[scalar]") {
  using F = shardsim::ScalarTraits<float>;
  using D = shardsim::ScalarTraits<double>;
  CHECK(F::identical(1.5f, 1.5f));
  CHECK_FALSE(F::identical(0.0f, -0.0f));
  CHECK_FALSE(F::identical(std::numeric_limits<float>::quiet_NaN(),
                           std::numeric_limits<float>::quiet_NaN()));
  CHECK(D::identical(-2.0, -2.0));
  CHECK_FALSE(D::identical(0.0, -0.0));
  CHECK_FALSE(D::identical(std::numeric_limits<double>::quiet_NaN(),
                           std::numeric_limits<double>::quiet_NaN()));
}

TEST_CASE("set_mp_precision(256) carries at least 256 bits and reports them", "[scalar][mp]") {
  const unsigned bits = shardsim::set_mp_precision(256);
  CHECK(bits >= 256);
  CHECK(shardsim::mp_significand_bits() == bits);
  // A freshly made value really has that many bits.
  const Mp one = 1;
  CHECK(mpfr_get_prec(one.backend().data()) == static_cast<mpfr_prec_t>(bits));
  // And the arithmetic resolves 2^-255 next to 1 (it would vanish at 53 or 128 bits).
  const Mp tiny = ldexp(Mp(1), -255);
  CHECK((one + tiny) != one);
  CHECK((one + tiny) - one == tiny);
}

TEST_CASE("round_to_f32 rounds once, directly, not through f64", "[scalar][mp]") {
  shardsim::set_mp_precision(256);
  // v = 1 + 2^-24 + 2^-60, exact at 256 bits.
  //   Floats next to 1 are 1 and 1 + 2^-23; their midpoint is 1 + 2^-24, and v lies 2^-60
  //   above it, so the correctly rounded float is 1 + 2^-23.
  //   Via f64: the doubles next to v are 1 + 2^-24 and 1 + 2^-24 + 2^-52; v is 2^-60 above the
  //   first, less than half an ulp (2^-53), so f64 gives exactly 1 + 2^-24. That is a float tie,
  //   and ties-to-even picks 1.0f (even significand): the double-rounding error.
  const Mp v = Mp(1) + ldexp(Mp(1), -24) + ldexp(Mp(1), -60);
  REQUIRE(v - 1 - ldexp(Mp(1), -24) == ldexp(Mp(1), -60));  // v is exact at this precision
  const float direct = shardsim::round_to_f32(v);
  CHECK(direct == 0x1.000002p+0f);  // 1 + 2^-23
  const double via_f64 = shardsim::round_to_f64(v);
  CHECK(via_f64 == 0x1.000001p+0);  // 1 + 2^-24
  CHECK(static_cast<float>(via_f64) == 1.0f);

  // The mirror case below the midpoint must round down in both paths.
  const Mp w = Mp(1) + ldexp(Mp(1), -24) - ldexp(Mp(1), -60);
  CHECK(shardsim::round_to_f32(w) == 1.0f);
  // An exact tie rounds to even: 1 + 2^-24 -> 1.0f; 1 + 3 * 2^-24 -> 1 + 2^-22.
  CHECK(shardsim::round_to_f32(Mp(1) + ldexp(Mp(1), -24)) == 1.0f);
  CHECK(shardsim::round_to_f32(Mp(1) + 3 * ldexp(Mp(1), -24)) == 0x1.000004p+0f);
}

TEST_CASE("round_to_f64 rounds to nearest even", "[scalar][mp]") {
  shardsim::set_mp_precision(256);
  // 1 + 2^-53 is the midpoint of 1 and 1 + 2^-52: ties-to-even gives 1; anything above goes up.
  CHECK(shardsim::round_to_f64(Mp(1) + ldexp(Mp(1), -53)) == 1.0);
  CHECK(shardsim::round_to_f64(Mp(1) + ldexp(Mp(1), -53) + ldexp(Mp(1), -200)) ==
        0x1.0000000000001p+0);
  // A value exactly representable in f64 is returned unchanged.
  CHECK(shardsim::round_to_f64(Mp(0.1)) == 0.1);
}

TEST_CASE("ulp_distance_mp measures |a - b| in ulps of b", "[scalar][mp]") {
  const unsigned bits = shardsim::set_mp_precision(256);
  const Mp one = 1;
  // ulp(1) at p bits is 2^(1 - p) (MPFR exponent of 1 is 1), so 3 * 2^(1-p) is 3 ulps.
  const Mp three_ulps = 3 * ldexp(Mp(1), 1 - static_cast<int>(bits));
  CHECK(shardsim::ulp_distance_mp(one + three_ulps, one) == 3.0);
  CHECK(shardsim::ulp_distance_mp(one, one) == 0.0);
  CHECK(std::isinf(shardsim::ulp_distance_mp(one, Mp(0))));
}

TEST_CASE("add_into, sub_into, mul_into on Mp equal Boost's operators, aliasing allowed",
          "[scalar][mp]") {
  shardsim::set_mp_precision(256);
  using shardsim::Mp;
  // 1/3 and 2/7 are not representable, so every result below is rounded: equality with the
  // operator's result checks the rounding (nearest even, at the run's 257 bits), not just the
  // value. Aliased forms (out is an operand) are how the kernels use them.
  const Mp a = Mp(1) / Mp(3);
  const Mp b = Mp(2) / Mp(7);
  Mp out = 0;
  shardsim::add_into(out, a, b);
  CHECK(shardsim::ScalarTraits<Mp>::identical(out, a + b));
  shardsim::sub_into(out, a, b);
  CHECK(shardsim::ScalarTraits<Mp>::identical(out, a - b));
  shardsim::mul_into(out, a, b);
  CHECK(shardsim::ScalarTraits<Mp>::identical(out, a * b));
  Mp acc = a;
  shardsim::mul_into(acc, acc, acc);
  CHECK(shardsim::ScalarTraits<Mp>::identical(acc, a * a));
  shardsim::add_into(acc, acc, b);
  CHECK(shardsim::ScalarTraits<Mp>::identical(acc, a * a + b));
  // float and double: the plain operators.
  float f = 0;
  shardsim::mul_into(f, 0.1f, 3.0f);
  CHECK(f == 0.1f * 3.0f);
}

// IEEE 754 (section 6.3): under round to nearest an exact difference x - x is +0, and a - b with
// a = +0, b = -0 is +0, with a = -0, b = +0 is -0. Boost's et_off operator-(const number&,
// number&&) computes -(b - a) instead, which turns the first case into -0; mp.hpp's overload for Mp
// subtracts in order. Each case is checked against double arithmetic (the same operation at f64,
// which rounds to nearest in hardware) with the right operand an rvalue, as in `p - lr * g` (an
// SGD step on a zero padding slot) or `dnorm - norm * mean` (RMSNorm backward on a masked row).
TEST_CASE("mp subtraction of an rvalue gives IEEE signs of zero, as f64 does", "[scalar]") {
  set_mp_precision(256);
  const double cases[][2] = {{0.0, 0.0},   {0.5, 0.5},   {0.0, -0.0}, {-0.0, 0.0},
                             {-0.0, -0.0}, {-2.5, -2.5}, {0.75, 0.25}};
  for (const auto& c : cases) {
    const double a = c[0];
    const double b = c[1];
    const Mp ma(a);
    const Mp one(1);
    const Mp from_rvalue = ma - Mp(b) * one;  // the right operand is an rvalue
    const Mp from_lvalues = ma - Mp(b);       // Mp(b) is an rvalue too
    const Mp mb(b);
    const Mp both_lvalues = ma - mb;
    const double expected = a - b;
    INFO(a << " - " << b);
    for (const Mp* r : {&from_rvalue, &from_lvalues, &both_lvalues}) {
      CHECK(round_to_f64(*r) == expected);
      CHECK(static_cast<bool>(signbit(*r)) == std::signbit(expected));
    }
  }
}
