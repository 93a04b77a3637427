// Tests for rng.hpp: Philox4x32-10 against published known answers, and the documented,
// reproducible tensor-initialization mapping.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <set>

#include "core/rng.hpp"

using shardsim::InitDist;
using shardsim::InitSpec;
using shardsim::PhiloxCounter;
using shardsim::PhiloxKey;

TEST_CASE("Philox4x32-10 matches Random123's kat_vectors", "[rng]") {
  // From Random123 (D. E. Shaw Research), tests/kat_vectors, lines "philox4x32 10 ...":
  // counter c0..c3, key k0..k1 -> out0..out3.
  CHECK(shardsim::philox4x32_10({0, 0, 0, 0}, {0, 0}) ==
        PhiloxCounter{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
  CHECK(shardsim::philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
                                {0xffffffff, 0xffffffff}) ==
        PhiloxCounter{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
  // The digits of pi.
  CHECK(shardsim::philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
                                {0xa4093822, 0x299f31d0}) ==
        PhiloxCounter{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
}

TEST_CASE("fnv1a64 matches the published FNV-1a test vectors", "[rng]") {
  // From the FNV reference (isthe.com/chongo/tech/comp/fnv): the offset basis for "", and
  // FNV-1a 64 of "a" = 0xaf63dc4c8601ec8c.
  CHECK(shardsim::fnv1a64("") == 0xcbf29ce484222325ULL);
  CHECK(shardsim::fnv1a64("a") == 0xaf63dc4c8601ec8cULL);
}

TEST_CASE("init_value follows the documented Philox mapping bit for bit", "[rng]") {
  // docs/scenario-format.md / rng.hpp: key = (seed lo, seed hi), counter = (i lo, i hi, "INIT", 0),
  // u = (out0 >> 8) * 2^-24, uniform value = float(low + (high - low) * u).
  InitSpec spec;
  spec.dist = InitDist::uniform;
  spec.low = -3.0;
  spec.high = 5.0;
  const std::uint64_t seed = 0x0123456789abcdefULL;
  // Index 2^32 + 5 exercises the counter's high word.
  for (std::uint64_t index : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{77},
                              (std::uint64_t{1} << 32) + 5}) {
    const PhiloxCounter out = shardsim::philox4x32_10(
        {static_cast<std::uint32_t>(index), static_cast<std::uint32_t>(index >> 32),
         shardsim::kInitStream, 0},
        {0x89abcdef, 0x01234567});
    const double u = std::ldexp(static_cast<double>(out[0] >> 8), -24);
    CHECK(shardsim::init_value(spec, seed, index) == static_cast<float>(-3.0 + 8.0 * u));
  }
  // Index i and i + 2^32 have different counters, so different values.
  CHECK(shardsim::init_value(spec, seed, 5) !=
        shardsim::init_value(spec, seed, (std::uint64_t{1} << 32) + 5));
}

TEST_CASE("init_value: uniform stays below high, constant is exact, draws are reproducible",
          "[rng]") {
  InitSpec uniform;
  uniform.dist = InitDist::uniform;
  uniform.low = -1.0;
  uniform.high = 1.0;
  // Over [-1, 1) every value -1 + 2u, u = m * 2^-24, m < 2^24, is a float exactly (it is a
  // multiple of 2^-23 of magnitude <= 1), so rounding cannot push it up to `high`. (The documented
  // float(low + (high - low) * u) is not half-open in general: when ulp(high) exceeds
  // (high - low) * 2^-24, e.g. [1e6, 1e6 + 1), the final rounding can return `high` itself.)
  std::set<float> distinct;
  double sum = 0;
  const int count = 4096;
  for (int i = 0; i < count; ++i) {
    const float v = shardsim::init_value(uniform, 42, static_cast<std::uint64_t>(i));
    CHECK(v >= -1.0f);
    CHECK(v < 1.0f);
    CHECK(v == shardsim::init_value(uniform, 42, static_cast<std::uint64_t>(i)));
    distinct.insert(v);
    sum += v;
  }
  // Not degenerate: nearly all draws differ (24-bit u over 4096 draws collides rarely), and the
  // mean of 4096 uniform(-1, 1) draws has standard deviation 1/sqrt(3 * 4096) ~ 0.009, so 0.05 is
  // more than five sigma.
  CHECK(distinct.size() > count - 8);
  CHECK(std::fabs(sum / count) < 0.05);
  // A different seed gives a different stream.
  CHECK(shardsim::init_value(uniform, 42, 0) != shardsim::init_value(uniform, 43, 0));

  InitSpec constant;
  constant.dist = InitDist::constant;
  constant.value = 0.375;
  for (std::uint64_t i : {0u, 1u, 999u}) CHECK(shardsim::init_value(constant, 42, i) == 0.375f);

  InitSpec normal;
  normal.dist = InitDist::normal;
  normal.mean = 0.5;
  normal.stddev = 2.0;
  double normal_sum = 0;
  for (int i = 0; i < count; ++i) {
    const float v = shardsim::init_value(normal, 7, static_cast<std::uint64_t>(i));
    CHECK(std::isfinite(v));  // u1 = 1 - u is in (0, 1], so log(u1) is finite
    CHECK(v == shardsim::init_value(normal, 7, static_cast<std::uint64_t>(i)));
    normal_sum += v;
  }
  // Sample mean of 4096 N(0.5, 2^2) draws: standard deviation 2 / 64 = 0.031; allow 0.2 (> 6 sigma).
  CHECK(std::fabs(normal_sum / count - 0.5) < 0.2);
}
