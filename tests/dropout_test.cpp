// Tests for the dropout mask mapping (rng.hpp), ops/dropout.hpp and ops/dropout_plan.hpp: the
// documented Philox mapping pinned to Random123's known answers, the threshold and scale, the
// global policy's masks equal to slices of the dense mask for every placement and N = 1..5, the
// buggy policies and the repetition detector, and the loader's checks.
#include "ops/dropout/dropout.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <string>

#include "compare/compare.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "ops/dropout/dropout_plan.hpp"
#include "scenario/scenario.hpp"
#include "scenario_test_support.hpp"
#include "tensor_test_support.hpp"

using shardsim::DropoutFrame;
using shardsim::DropoutMask;
using shardsim::DropoutParams;
using shardsim::DropoutPolicy;
using shardsim::Mp;
using shardsim::Placement;
using shardsim::Shape;
using shardsim::Tensor;
using tensor_test::assemble;
using tensor_test::bitwise_equal;

namespace {

using scenario_test::load_error;

DropoutParams params(double p, std::uint32_t forward_pass = 1) {
  DropoutParams out;
  out.p = p;
  out.seed = 0x0123456789abcdefULL;
  out.stream = 3;
  out.forward_pass = forward_pass;
  return out;
}

DropoutMask dense_mask(const Shape& shape, const DropoutParams& p) {
  DropoutFrame whole;
  whole.global = shape;
  return shardsim::dropout_mask(shape, whole, p, DropoutPolicy::global);
}

}  // namespace

TEST_CASE("the dropout word is Philox with the documented counter and key layout", "[dropout]") {
  // rng.hpp: key = (seed lo, seed hi), counter = (index lo, index hi, stream, forward pass),
  // word = out[0]. Random123's kat_vectors for philox4x32-10 pin every word of that layout:
  //   all zeros -> out0 = 6627e8d5;  all ones -> out0 = 408f276d;
  //   ctr 243f6a88 85a308d3 13198a2e 03707344, key a4093822 299f31d0 -> out0 = d16cfe09.
  CHECK(shardsim::dropout_word(0, 0, 0, 0) == 0x6627e8d5u);
  CHECK(shardsim::dropout_word(~0ULL, 0xffffffffu, 0xffffffffu, ~0ULL) == 0x408f276du);
  CHECK(shardsim::dropout_word(0x299f31d0a4093822ULL, 0x13198a2eu, 0x03707344u,
                               0x85a308d3243f6a88ULL) == 0xd16cfe09u);
}

TEST_CASE("the drop threshold is floor(p * 2^32) and keep means word >= threshold", "[dropout]") {
  CHECK(shardsim::dropout_threshold(0.0) == 0u);
  CHECK(shardsim::dropout_threshold(0.5) == 0x80000000u);
  CHECK(shardsim::dropout_threshold(0.75) == 0xc0000000u);
  // The double nearest 0.1 is 0.1000000000000000055511..., times 2^32 = 429496729.600000024:
  CHECK(shardsim::dropout_threshold(0.1) == 429496729u);
  // The largest double below 1 gives 2^32 - 2^-21 before the floor: 0xffffffff.
  CHECK(shardsim::dropout_threshold(std::nextafter(1.0, 0.0)) == 0xffffffffu);
  CHECK(shardsim::dropout_keep(0x80000000u, 0x80000000u));
  CHECK_FALSE(shardsim::dropout_keep(0x7fffffffu, 0x80000000u));
  CHECK(shardsim::dropout_keep(0u, 0u));  // p = 0 keeps everything

  // Element i of a dense mask is exactly keep(word(seed, stream, step, i), threshold).
  const Shape shape({{"seq", 5}, {"hidden", 7}});
  const DropoutParams p = params(0.3, 2);
  const DropoutMask mask = dense_mask(shape, p);
  for (std::int64_t i = 0; i < shape.numel(); ++i) {
    const std::uint32_t word =
        shardsim::dropout_word(p.seed, p.stream, p.forward_pass, static_cast<std::uint64_t>(i));
    CHECK(mask.keep[static_cast<std::size_t>(i)] == (word >= shardsim::dropout_threshold(0.3)));
  }
}

TEST_CASE("dropout drops about a fraction p and each forward pass draws a fresh mask",
          "[dropout]") {
  // 100000 independent decisions at p = 0.3: the dropped fraction has standard deviation
  // sqrt(0.3 * 0.7 / 100000) = 0.00145, so 0.01 is about seven sigma.
  const Shape shape({{"seq", 100}, {"hidden", 1000}});
  const DropoutMask first = dense_mask(shape, params(0.3, 1));
  std::int64_t dropped = 0;
  for (std::uint8_t keep : first.keep) dropped += keep ? 0 : 1;
  CHECK(std::fabs(static_cast<double>(dropped) / 100000.0 - 0.3) < 0.01);
  const DropoutMask second = dense_mask(shape, params(0.3, 2));
  CHECK(first.keep != second.keep);
  CHECK(dense_mask(shape, params(0.3, 1)).keep == first.keep);  // reproducible
}

TEMPLATE_TEST_CASE("dropout scales kept values by 1/(1-p) and zeroes the rest", "[dropout]", float,
                   double, Mp) {
  shardsim::set_mp_precision(256);
  const Shape shape({{"hidden", 4}});
  const auto x = tensor_test::make<TestType>(shape, {1.5, -2, 3, -0.25});
  DropoutMask mask;
  mask.keep = {1, 0, 1, 0};
  mask.valid = {1, 1, 1, 1};
  // scale = T(1) / (T(1) - T(p)), each operation rounded once in T.
  const TestType scale = TestType(1) / TestType(TestType(1) - TestType(0.1));
  Tensor<TestType> y, dx;
  shardsim::dropout_forward(x, mask, 0.1, y);
  CHECK(y[0] == TestType(TestType(1.5) * scale));
  CHECK(y[2] == TestType(TestType(3) * scale));
  // Dropped positions are +0, whatever the sign of x.
  CHECK(shardsim::ScalarTraits<TestType>::identical(y[1], TestType(0)));
  CHECK(shardsim::ScalarTraits<TestType>::identical(y[3], TestType(0)));
  shardsim::dropout_backward(x, mask, 0.1, dx);
  CHECK(bitwise_equal(dx, y));  // the same map: dx = dy * scale where kept
  // p = 0: everything kept with scale exactly 1, so y == x bitwise (dropout disabled).
  shardsim::dropout_forward(x, dense_mask(shape, params(0.0)), 0.0, y);
  CHECK(bitwise_equal(y, x));
}

TEMPLATE_TEST_CASE("global policy: every rank's mask is the slice of the dense mask", "[dropout]",
                   float, double, Mp) {
  shardsim::set_mp_precision(256);
  const Shape shape({{"batch", 2}, {"seq", 7}, {"hidden", 5}});
  const Tensor<TestType> x = tensor_test::seeded<TestType>(shape, -1, 1, 41);
  const DropoutParams p = params(0.4);
  const DropoutMask dense = dense_mask(shape, p);
  const Tensor<TestType> dense_values = shardsim::mask_values<TestType>(shape, dense);
  Tensor<TestType> y;
  shardsim::dropout_forward(x, dense, p.p, y);
  std::vector<Placement> placements = tensor_test::shards_of("seq");
  for (const std::string axis : {"batch", "hidden"}) {
    for (const Placement& q : tensor_test::shards_of(axis)) placements.push_back(q);
  }
  placements.push_back(Placement::replicate());
  for (int ranks = 1; ranks <= 5; ++ranks) {
    shardsim::World<TestType> world(ranks, shardsim::ReduceOrder::rank, shardsim::Schedule{});
    for (const Placement& placement : placements) {
      INFO(ranks << " ranks, " << placement.str());
      const auto sx = shardsim::distribute("x", x, placement, ranks);
      std::vector<std::string> seen;
      world.set_hook(
          [&](const shardsim::BoundaryLabel& label, const shardsim::DistTensor<TestType>& t) {
            seen.push_back(label.tensor);
            if (label.tensor == "y.mask") CHECK(bitwise_equal(assemble(t), dense_values));
            if (label.op == "dropout_repetition") {
              for (const auto& local : t.locals) {
                for (std::int64_t e = 0; e < local.numel(); ++e) CHECK(local[e] == TestType(0));
              }
            }
            return true;
          });
      shardsim::DropoutShardedSaved saved;
      const auto sy = shardsim::dropout_sharded(world, sx, p, DropoutPolicy::global, "y", saved);
      CHECK(bitwise_equal(assemble(sy), y));
      const std::vector<std::string> expected =
          placement.is_shard() ? std::vector<std::string>{"y.mask@repetition", "y.mask", "y"}
                               : std::vector<std::string>{"y.mask", "y"};
      CHECK(seen == expected);
      const auto sdx = shardsim::dropout_backward_sharded(world, sx, saved, p.p, "grad(x)");
      CHECK(bitwise_equal(assemble(sdx), y));  // dx of dy = x is y
    }
  }
}

namespace {

std::string dropout_scenario(const std::string& placement, const std::string& keys) {
  return "[mesh]\nranks = 2\n"
         "[[tensors]]\nname = \"x\"\naxes = [\"seq\", \"hidden\"]\nshape = [4, 16]\n"
         "placement = \"" +
         placement +
         "\"\n"
         "[[steps]]\nop = \"dropout\"\ninput = \"x\"\noutput = \"y\"\n" +
         keys;
}

}  // namespace

TEST_CASE("the loader checks dropout's p, stream, policy and placement with a location",
          "[dropout][scenario]") {
  CHECK(load_error(dropout_scenario("Shard(seq)", "p = 0.0\n")).empty());
  const std::string p_one = load_error(dropout_scenario("Shard(seq)", "p = 1.0\n"));
  CHECK(p_one.find("s.toml:") == 0);
  CHECK(p_one.find("steps[0].p: p must be in [0, 1)") != std::string::npos);
  CHECK(load_error(dropout_scenario("Shard(seq)", "p = -0.25\n")).find("steps[0].p") !=
        std::string::npos);
  CHECK(load_error(dropout_scenario("Shard(seq)", "p = 0.1\nstream = 4294967296\n"))
            .find("steps[0].stream") != std::string::npos);
  CHECK(load_error(dropout_scenario("Shard(seq)", "p = 0.1\npolicy = \"local\"\n"))
            .find("steps[0].policy: unknown value 'local'") != std::string::npos);
  CHECK(load_error(dropout_scenario("Partial(sum)", "p = 0.1\n")).find("steps[0].input") !=
        std::string::npos);
  // The policy key is the same switch as the faults: same_seed repeats masks (2 ranks of 32
  // elements agree everywhere, tail 2^-32 at p = 0.5).
  const auto same = shardsim::parse_scenario(
      dropout_scenario("Shard(seq)", "p = 0.5\npolicy = \"same_seed\"\n"), "drop.toml");
  const shardsim::RunReport run = shardsim::evaluate(same, shardsim::parse_precision("f64"));
  REQUIRE(run.first_divergence);
  CHECK(run.first_divergence->tensor == "y.mask@repetition");
}
