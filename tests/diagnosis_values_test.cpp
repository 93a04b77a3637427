// Tests for the diagnosis signatures that read one boundary's values (signatures.hpp):
// constant_ratio, constant_fill and hidden_cast (precision_trend: diagnosis_trend_test.cpp).
// Every case is a synthetic tensor with a hand-derived known answer.
#include <catch2/catch.hpp>
#include <cmath>

#include "diagnosis/signatures.hpp"

using shardsim::Cause;
using shardsim::Observed;
using shardsim::Placement;
using shardsim::Shape;

namespace {

const double kF64 = std::ldexp(1.0, -53);

// dense [seq=4] Shard(seq) over 2 ranks, every sharded value replaced by f(dense).
template <typename F>
Observed scaled(std::vector<double> dense, F f) {
  Observed o = shardsim::observed_of("t", Shape({{"seq", 4}}), Placement::shard("seq"), 2, dense);
  for (auto& local : o.ranks) {
    for (double& v : local) v = f(v);
  }
  return o;
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("constant_ratio names 1/ranks, the unbiased factor and unnamed integers", "[diagnosis]") {
  const std::vector<shardsim::NamedCount> counts{{"ranks", 4}, {"hidden", 16}};
  // A loss divided by the world size again: every ratio is exactly 1/4 = 1/ranks.
  const auto quarter =
      shardsim::constant_ratio(scaled({1, 2, 3, 4}, [](double v) { return v / 4; }), counts, kF64);
  CHECK(quarter.cause == Cause::wrong_divisor);
  CHECK(quarter.confidence == 0.9);
  CHECK(has(quarter.evidence, "= 1/4 (ranks)"));
  // rstd with var/(H-1): ratio sqrt(15/16) = 0.968 (H = hidden = 16).
  const auto unbiased = shardsim::constant_ratio(
      scaled({2, 4, 6, 8}, [](double v) { return v * std::sqrt(15.0 / 16.0); }), counts, kF64);
  CHECK(unbiased.cause == Cause::normalization_convention);
  CHECK(has(unbiased.evidence, "sqrt(15/16)"));
  // A factor 3 that no count of the program explains: weaker.
  const auto three =
      shardsim::constant_ratio(scaled({1, 2, 3, 4}, [](double v) { return 3 * v; }), counts, kF64);
  CHECK(three.cause == Cause::wrong_divisor);
  CHECK(three.confidence == 0.6);
  // Not constant (an offset, not a factor): ratios 2, 1.5, 1.33, 1.25.
  const auto offset =
      shardsim::constant_ratio(scaled({1, 2, 3, 4}, [](double v) { return v + 1; }), counts, kF64);
  CHECK_FALSE(offset.present());
  CHECK(has(offset.evidence, "not one constant"));
  // A ratio of 1 + 1e-9 (rounding-sized) is no factor at all.
  CHECK_FALSE(shardsim::constant_ratio(
                  scaled({1, 2, 3, 4}, [](double v) { return v * (1 + 1e-9); }), counts, kF64)
                  .present());
}

TEST_CASE("constant_fill finds ones/zeros where the data varies", "[diagnosis]") {
  Observed ones = shardsim::observed_of("w", Shape({{"hidden", 4}}), Placement::replicate(), 2,
                                        {0.5, 1.5, 0.7, 1.2});
  for (auto& local : ones.ranks) local.assign(4, 1.0);
  const auto f = shardsim::constant_fill(ones);
  CHECK(f.cause == Cause::default_value);
  CHECK(f.confidence == 0.8);  // 1 is a default init
  CHECK(has(f.evidence, "every sharded value of w is 1 (8 elements)"));
  for (auto& local : ones.ranks) local.assign(4, 0.3);
  CHECK(shardsim::constant_fill(ones).confidence == 0.55);  // a constant, but no default
  Observed flat =
      shardsim::observed_of("w", Shape({{"hidden", 4}}), Placement::replicate(), 2, {2, 2, 2, 2});
  for (auto& local : flat.ranks) local.assign(4, 1.0);
  CHECK_FALSE(shardsim::constant_fill(flat).present());  // the dense values are constant too
}

TEST_CASE("hidden_cast sees f32 and bf16 rounding in a wider run", "[diagnosis]") {
  std::vector<double> dense;
  for (int i = 0; i < 64; ++i) dense.push_back(2 + std::sin(i + 0.5));  // not f32 numbers
  Observed o = shardsim::observed_of("y", Shape({{"seq", 64}}), Placement::shard("seq"), 4, dense);
  auto with = [&](auto round) {
    Observed out = o;
    for (auto& local : out.ranks) {
      for (double& v : local) v = round(v);
    }
    return out;
  };
  // Rounded to f32: every relative gap <= 2^-24 (round to nearest), values are f32 numbers.
  const Observed f32 = with([](double v) { return double(float(v)); });
  const auto cast = shardsim::hidden_cast(f32, 53);
  CHECK(cast.cause == Cause::hidden_cast);
  CHECK(cast.confidence == 0.95);
  CHECK(has(cast.evidence, "the rounding of f32"));
  CHECK(has(cast.evidence, "64 of 64 differing sharded values are f32 numbers"));
  // In an f32 run a cast to f32 is the identity: nothing narrower fits a 2^-25 gap.
  CHECK_FALSE(shardsim::hidden_cast(f32, 24).present());
  // Rounded to 8 significand bits (bf16): gaps up to 2^-8.
  const Observed bf16 = with([](double v) {
    int e = 0;
    const double m = std::frexp(v, &e);
    return std::ldexp(std::nearbyint(std::ldexp(m, 8)), e - 8);
  });
  CHECK(has(shardsim::hidden_cast(bf16, 53).evidence, "the rounding of bf16"));
  // A 1e-3 relative bug is no cast.
  CHECK_FALSE(shardsim::hidden_cast(with([](double v) { return v * 1.001; }), 53).present());
}
