// bf16 and f16 conversions (narrow.hpp): every bit pattern round-trips, and rounding from float
// and double agrees with an independent reference: MPFR rounding to the format's precision and
// exponent range (mpfr_check_range + mpfr_subnormalize, MPFR's documented IEEE emulation), then
// an encoder that only copies bits of the exactly representable result.
#include <mpfr.h>

#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "core/narrow.hpp"

using namespace shardsim;

namespace {

// The bits of `value`, which REQUIRES to be exactly representable in `format`.
std::uint16_t encode_exact(NarrowFormat format, double value) {
  const NarrowFormatInfo info = narrow_info(format);
  const int mantissa_bits = info.significand_bits - 1;
  const std::uint16_t sign = std::signbit(value) ? 0x8000 : 0;
  const double magnitude = std::fabs(value);
  if (magnitude == 0) return sign;
  if (std::isinf(magnitude)) {
    return sign | static_cast<std::uint16_t>(((1u << info.exponent_bits) - 1) << mantissa_bits);
  }
  const int emin = 1 - info.bias;
  int exponent = 0;
  std::frexp(magnitude, &exponent);  // magnitude = f * 2^exponent, f in [1/2, 1)
  exponent -= 1;                     // magnitude = g * 2^exponent, g in [1, 2)
  if (exponent < emin) {
    const double units = std::ldexp(magnitude, mantissa_bits - emin);  // an integer
    REQUIRE(units == std::floor(units));
    return sign | static_cast<std::uint16_t>(units);
  }
  const double units = std::ldexp(magnitude, mantissa_bits - exponent);  // in [2^m, 2^(m+1))
  REQUIRE(units == std::floor(units));
  const auto field = static_cast<std::uint16_t>(exponent + info.bias);
  return sign | static_cast<std::uint16_t>(field << mantissa_bits) |
         static_cast<std::uint16_t>(static_cast<std::uint32_t>(units) - (1u << mantissa_bits));
}

std::uint16_t mpfr_reference(NarrowFormat format, double value) {
  const NarrowFormatInfo info = narrow_info(format);
  if (std::isnan(value)) return (std::signbit(value) ? 0x8000 : 0) | info.quiet_nan;
  const mpfr_exp_t old_emin = mpfr_get_emin();
  const mpfr_exp_t old_emax = mpfr_get_emax();
  mpfr_set_emin(3 - info.bias - info.significand_bits);
  mpfr_set_emax(info.bias + 1);
  mpfr_t r;
  mpfr_init2(r, info.significand_bits);
  int ternary = mpfr_set_d(r, value, MPFR_RNDN);
  ternary = mpfr_check_range(r, ternary, MPFR_RNDN);
  mpfr_subnormalize(r, ternary, MPFR_RNDN);
  const double rounded = mpfr_get_d(r, MPFR_RNDN);  // exact: r has at most 11 bits
  mpfr_clear(r);
  mpfr_set_emin(old_emin);
  mpfr_set_emax(old_emax);
  return encode_exact(format, rounded);
}

std::uint64_t splitmix(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

const NarrowFormat kFormats[] = {NarrowFormat::bf16, NarrowFormat::f16};
const char* name(NarrowFormat f) { return f == NarrowFormat::bf16 ? "bf16" : "f16"; }

}  // namespace

TEST_CASE("narrow: every bit pattern round-trips through float and double", "[narrow]") {
  for (NarrowFormat format : kFormats) {
    INFO(name(format));
    int nans = 0;
    for (std::uint32_t bits = 0; bits <= 0xffff; ++bits) {
      const auto pattern = static_cast<std::uint16_t>(bits);
      const float wide = narrow_to_float(format, pattern);
      if (narrow_is_nan(format, pattern)) {
        // NaN stays NaN with its sign, as the format's quiet NaN (the payload is not kept).
        ++nans;
        REQUIRE(std::isnan(wide));
        const std::uint16_t back = narrow_from_float(format, wide);
        REQUIRE(back == ((pattern & 0x8000) | narrow_info(format).quiet_nan));
        continue;
      }
      REQUIRE(narrow_from_float(format, wide) == pattern);
      REQUIRE(narrow_from_double(format, static_cast<double>(wide)) == pattern);
      REQUIRE(encode_exact(format, wide) == pattern);  // the reference encoder agrees
    }
    // bf16: 2 signs x (2^7 - 1) non-zero mantissas; f16: 2 x (2^10 - 1).
    CHECK(nans == (format == NarrowFormat::bf16 ? 2 * 127 : 2 * 1023));
  }
}

TEST_CASE("narrow: ties, subnormals and overflow round like MPFR's IEEE emulation",
          "[narrow]") {
  for (NarrowFormat format : kFormats) {
    INFO(name(format));
    const NarrowFormatInfo info = narrow_info(format);
    // Every midpoint between consecutive finite patterns (ties to even), and its neighbours one
    // float ulp either side; midpoints are exact in double (one more bit than the format).
    for (std::uint32_t bits = 0; bits < 0x7fff; ++bits) {
      const double lo = narrow_to_float(format, static_cast<std::uint16_t>(bits));
      const double hi = narrow_to_float(format, static_cast<std::uint16_t>(bits + 1));
      if (std::isinf(hi) || std::isnan(hi)) break;
      const double mid = (lo + hi) / 2;
      for (double x : {mid, -mid, std::nextafter(mid, 0.0), std::nextafter(mid, 1e300)}) {
        INFO("x = " << x);
        REQUIRE(narrow_from_double(format, x) == mpfr_reference(format, x));
        const float xf = static_cast<float>(x);
        REQUIRE(narrow_from_float(format, xf) == mpfr_reference(format, xf));
      }
    }
    // Overflow: the largest finite value plus half an ulp rounds to infinity (ties to even: the
    // largest finite mantissa is odd), one double ulp below stays finite.
    const int mantissa_bits = info.significand_bits - 1;
    const double largest = std::ldexp(2.0 - std::ldexp(1.0, -mantissa_bits), info.bias);
    const double overflow = largest + std::ldexp(1.0, info.bias - mantissa_bits - 1);
    CHECK(std::isinf(narrow_to_float(format, narrow_from_double(format, overflow))));
    CHECK(narrow_to_float(format, narrow_from_double(format, std::nextafter(overflow, 0.0))) ==
          largest);
    CHECK(narrow_from_double(format, 1e300) == mpfr_reference(format, 1e300));
    CHECK(narrow_from_double(format, -std::numeric_limits<double>::infinity()) ==
          mpfr_reference(format, -std::numeric_limits<double>::infinity()));
    // Far below the smallest subnormal: signed zero; double subnormals too.
    CHECK(narrow_from_double(format, -1e-300) == 0x8000);
    CHECK(narrow_from_double(format, std::numeric_limits<double>::denorm_min()) == 0);
    CHECK(narrow_from_double(format, std::nan("")) == info.quiet_nan);
  }
}

TEST_CASE("narrow: random floats and doubles agree with MPFR", "[narrow]") {
  std::uint64_t state = 20261201;
  for (NarrowFormat format : kFormats) {
    INFO(name(format));
    for (int i = 0; i < 200000; ++i) {
      const std::uint64_t word = splitmix(state);
      const float f = std::bit_cast<float>(static_cast<std::uint32_t>(word));
      const double d = std::bit_cast<double>(word);
      INFO("float bits " << static_cast<std::uint32_t>(word) << ", double bits " << word);
      REQUIRE(narrow_from_float(format, f) == mpfr_reference(format, f));
      if (!std::isnan(d)) REQUIRE(narrow_from_double(format, d) == mpfr_reference(format, d));
    }
  }
}

TEST_CASE("narrow: a double is rounded once, not through float", "[narrow]") {
  // 1 + 2^-8 + 2^-30 is above the bf16 midpoint 1 + 2^-8 between 1 and 1 + 2^-7, so it rounds up
  // to 1 + 2^-7 (0x3f81). Through float, 2^-30 is lost (float keeps 24 bits): the float is the
  // exact midpoint, which ties to even, 1.0 (0x3f80).
  const double x = 1.0 + 0x1p-8 + 0x1p-30;
  CHECK(narrow_from_double(NarrowFormat::bf16, x) == 0x3f81);
  CHECK(narrow_from_float(NarrowFormat::bf16, static_cast<float>(x)) == 0x3f80);
  CHECK(mpfr_reference(NarrowFormat::bf16, x) == 0x3f81);
}

TEST_CASE("narrow: ULP distance by the ordered-integer mapping", "[narrow]") {
  // bf16: 1.0 = 0x3f80, next up 0x3f81; -0 and +0 at distance 0; across zero the smallest
  // subnormals -0x0001 and +0x0001 are 2 apart.
  CHECK(narrow_ulp_distance(NarrowFormat::bf16, 0x3f80, 0x3f81) == 1);
  CHECK(narrow_ulp_distance(NarrowFormat::bf16, 0x8000, 0x0000) == 0);
  CHECK(narrow_ulp_distance(NarrowFormat::f16, 0x8001, 0x0001) == 2);
  CHECK(narrow_ulp_distance(NarrowFormat::f16, 0x7e00, 0x7e00) == UINT64_MAX);
  // f16: 65504 (0x7bff) to +inf (0x7c00) is one step.
  CHECK(narrow_ulp_distance(NarrowFormat::f16, 0x7bff, 0x7c00) == 1);
}
