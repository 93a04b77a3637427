// Narrow storage (storage.hpp, narrow_float.hpp): the fast boundary rounding agrees with the
// exact-tested conversion of narrow.hpp everywhere it matters, the precisions parse, the default
// tolerances follow their rule, and NarrowFloat rounds every operation.
#include "core/storage.hpp"

#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "core/error.hpp"
#include "core/narrow_float.hpp"

using namespace shardsim;

namespace {

constexpr NarrowFormat kFormats[] = {NarrowFormat::bf16, NarrowFormat::f16};

std::uint64_t splitmix(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// The reference: narrow.hpp's conversion (exhaustively tested against MPFR in narrow_test.cpp).
float reference(NarrowFormat format, float value) {
  return narrow_to_float(format, narrow_from_float(format, value));
}

bool same_bits(float a, float b) {
  return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
}

}  // namespace

TEST_CASE(
    "storage: the fast rounding equals narrow_from_float at every value, midpoint and its "
    "float neighbours",
    "[storage]") {
  // Rounding can only change at the midpoints between consecutive narrow values: for every
  // pattern, its value and the midpoint to the next pattern, each with the 3 floats on either
  // side, cover every tie and every decision next to one (subnormals, the largest binade and
  // the step to infinity included).
  for (NarrowFormat format : kFormats) {
    INFO(narrow_name(format));
    for (std::uint32_t bits = 0; bits < 0x10000; ++bits) {
      const float value = narrow_to_float(format, static_cast<std::uint16_t>(bits));
      const float next = narrow_to_float(format, static_cast<std::uint16_t>(bits + 1));
      float probes[2] = {value, value};
      if (std::isfinite(value) && std::isfinite(next) && bits != 0x7fff && bits != 0xffff) {
        probes[1] = static_cast<float>((static_cast<double>(value) + next) / 2);  // exact
      }
      for (float probe : probes) {
        if (std::isnan(probe)) continue;
        const std::uint32_t center = std::bit_cast<std::uint32_t>(probe);
        for (std::int64_t delta = -3; delta <= 3; ++delta) {
          const float f = std::bit_cast<float>(static_cast<std::uint32_t>(center + delta));
          INFO("float bits " << std::bit_cast<std::uint32_t>(f));
          REQUIRE(same_bits(round_to_narrow(format, f), reference(format, f)));
        }
      }
    }
  }
}

TEST_CASE("storage: the fast rounding equals narrow_from_float on random floats, NaN and inf",
          "[storage]") {
  std::uint64_t state = 20261214;
  for (NarrowFormat format : kFormats) {
    INFO(narrow_name(format));
    for (int i = 0; i < 1000000; ++i) {
      const float f = std::bit_cast<float>(static_cast<std::uint32_t>(splitmix(state)));
      INFO("float bits " << std::bit_cast<std::uint32_t>(f));
      REQUIRE(same_bits(round_to_narrow(format, f), reference(format, f)));
    }
    const float inf = std::numeric_limits<float>::infinity();
    CHECK(same_bits(round_to_narrow(format, inf), inf));
    CHECK(same_bits(round_to_narrow(format, -inf), -inf));
    // NaN: the format's quiet NaN with the input's sign, payload dropped (narrow.hpp).
    const float payload_nan = std::bit_cast<float>(0xffc01234u);
    CHECK(same_bits(round_to_narrow(format, payload_nan), reference(format, payload_nan)));
    // The array form is the scalar form, element by element.
    float values[3] = {1.0f + 0x1p-9f, -0x1p-30f, 70000.0f};
    round_to_narrow(format, values, 3);
    CHECK(same_bits(values[0], reference(format, 1.0f + 0x1p-9f)));
    CHECK(same_bits(values[1], reference(format, -0x1p-30f)));
    CHECK(same_bits(values[2], reference(format, 70000.0f)));
  }
}

TEST_CASE("storage: bf16 and f16 parse as precisions with their significand bits", "[storage]") {
  CHECK(parse_precision("bf16") == Precision{ScalarKind::bf16, 8});
  CHECK(parse_precision("f16") == Precision{ScalarKind::f16, 11});
  CHECK(parse_precision("bf16").name() == "bf16");
  CHECK(parse_precision("f16").is_narrow());
  CHECK_FALSE(parse_precision("f32").is_narrow());
  CHECK(narrow_format(parse_precision("bf16")) == NarrowFormat::bf16);
  CHECK_THROWS_WITH(parse_precision("bf8"),
                    "invalid precision 'bf8': expected bf16, f16, f32, f64, dd, qd or mp<bits> "
                    "(e.g. mp256)");
  CHECK(parse_accumulate("storage") == Accumulate::storage);
  CHECK(parse_accumulate("f32") == Accumulate::f32);
  CHECK_FALSE(parse_accumulate("bf16").has_value());
}

TEST_CASE("storage: default tolerances are 16 ulps of the format, 65536 ulps of f32 and f64",
          "[storage]") {
  // 2^(5 - p): p = 8 gives 2^-3, p = 11 gives 2^-6 (scalar.hpp); 2^(16 - p) above.
  CHECK(default_rtol(parse_precision("bf16")) == 0x1p-3);
  CHECK(default_rtol(parse_precision("f16")) == 0x1p-6);
  CHECK(default_rtol(parse_precision("f32")) == 0x1p-8);
  CHECK(default_rtol(parse_precision("f64")) == 0x1p-37);
}

TEST_CASE(
    "storage: NarrowFloat rounds every operation, so a bf16 running sum of ones stalls at 256",
    "[storage]") {
  set_narrow_float_format(NarrowFormat::bf16);
  // bf16 keeps 8 significant bits: the integers are exact up to 256 = 2^8, then spaced by 2.
  // 256 + 1 = 257 is the midpoint of 256 (even significand 0x4380) and 258 (0x4381): ties to
  // even give 256, and so does every further + 1. A float accumulator reaches 300, which bf16
  // holds exactly (300 = 2 * 150).
  NarrowFloat sum = 0;
  float wide = 0;
  for (int i = 0; i < 300; ++i) {
    sum += NarrowFloat(1);
    wide += 1.0f;
  }
  CHECK(sum.value() == 256.0f);
  CHECK(round_to_bf16(wide) == 300.0f);
  // Small terms vanish: 256 + 0.5 rounds back to 256; 1 + 2^-9 to 1 (below half an ulp, 2^-8).
  CHECK((sum + NarrowFloat(0.5)).value() == 256.0f);
  CHECK((NarrowFloat(1) + NarrowFloat(0x1p-9)).value() == 1.0f);
  // Construction from a double rounds once: 1 + 2^-8 + 2^-30 is above the midpoint 1 + 2^-8.
  CHECK(NarrowFloat(1.0 + 0x1p-8 + 0x1p-30).value() == 1.0f + 0x1p-7f);
  // f16 keeps 11 bits: 2048 + 1 ties to 2048.
  set_narrow_float_format(NarrowFormat::f16);
  CHECK((NarrowFloat(2048) + NarrowFloat(1)).value() == 2048.0f);
  CHECK((NarrowFloat(65504) * NarrowFloat(2)).value() == std::numeric_limits<float>::infinity());
  set_narrow_float_format(NarrowFormat::bf16);
}
