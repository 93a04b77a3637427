// Tests for ops/rms_norm.hpp and ops/rms_norm_plan.hpp: known answers, the property that RMSNorm
// and LayerNorm are different ops (and agree exactly where they should: a zero-mean row), and
// sharded == dense for the row-sharded (bitwise) and hidden-sharded (sum of squares) plans.
#include "ops/rms_norm/rms_norm.hpp"

#include <catch2/catch.hpp>
#include <string>
#include <type_traits>
#include <vector>

#include "core/world.hpp"
#include "ops/layer_norm/layer_norm.hpp"
#include "ops/rms_norm/rms_norm_plan.hpp"
#include "tensor_test_support.hpp"

using shardsim::DistTensor;
using shardsim::Mp;
using shardsim::Placement;
using shardsim::RmsNormParams;
using shardsim::RmsNormSaved;
using shardsim::Shape;
using shardsim::SplitPolicy;
using shardsim::Tensor;
using tensor_test::make;
using tensor_test::seeded;

// Known answer, exact in every type. x = [2, -2, 2, -2], eps = 0, weight = [1, 0.5, 3, -1]:
//   mean(x^2) = 16 / 4 = 4, sqrt(4) = 2, rrms = 1 / 2 = 0.5     (all exact in binary)
//   y = x * 0.5 * w = [1, -1, 1, -1] * w = [1, -0.5, 3, 1]
TEMPLATE_TEST_CASE("rms_norm_forward exact known answer", "[rms_norm]", float, double, Mp) {
  shardsim::set_mp_precision(256);
  const auto x = make<TestType>(Shape({{"seq", 1}, {"hidden", 4}}), {2, -2, 2, -2});
  const auto w = make<TestType>(Shape({{"hidden", 4}}), {1, 0.5, 3, -1});
  RmsNormParams params;
  params.eps = 0;
  Tensor<TestType> y;
  RmsNormSaved<TestType> saved;
  shardsim::rms_norm_forward(x, &w, params, y, saved);
  REQUIRE(saved.rrms.shape() == Shape({{"seq", 1}}));
  CHECK(saved.rrms[0] == TestType(0.5));
  const double expected[4] = {1, -0.5, 3, 1};
  for (int i = 0; i < 4; ++i) CHECK(y[i] == TestType(expected[i]));
}

// Known answer against a 256-bit truth. x = [1, 2, 3, 4], eps = 0, no weight:
//   mean(x^2) = (1 + 4 + 9 + 16) / 4 = 7.5 (exact), rrms = 1 / sqrt(7.5), y_i = i / sqrt(7.5).
// rrms: sqrt and division each correctly rounded, so within 2u: 2 ulps. y_i = x_i * rrms adds one
// more rounding: 3 ulps.
TEMPLATE_TEST_CASE("rms_norm_forward known answer against mp256", "[rms_norm]", float, double) {
  shardsim::set_mp_precision(256);
  const auto x = make<TestType>(Shape({{"seq", 1}, {"hidden", 4}}), {1, 2, 3, 4});
  RmsNormParams params;
  params.eps = 0;
  Tensor<TestType> y;
  RmsNormSaved<TestType> saved;
  shardsim::rms_norm_forward<TestType>(x, nullptr, params, y, saved);
  auto rounded = [](const Mp& v) {
    if constexpr (std::is_same_v<TestType, float>)
      return shardsim::round_to_f32(v);
    else
      return shardsim::round_to_f64(v);
  };
  const Mp rrms = 1 / sqrt(Mp(7.5));
  CHECK(shardsim::ulp_distance(saved.rrms[0], rounded(rrms)) <= 2);
  for (int i = 0; i < 4; ++i) {
    INFO("i = " << i);
    CHECK(shardsim::ulp_distance(y[i], rounded(Mp(i + 1) * rrms)) <= 3);
  }
}

TEMPLATE_TEST_CASE("layer_norm and rms_norm are different ops", "[rms_norm][layer_norm]", float,
                   double, Mp) {
  shardsim::set_mp_precision(256);
  // Distinct saved statistics: the types differ, so one op's saved state cannot be handed to
  // the other's backward.
  STATIC_REQUIRE(!std::is_same_v<RmsNormSaved<TestType>, shardsim::LayerNormSaved<TestType>>);
  STATIC_REQUIRE(
      !std::is_convertible_v<RmsNormSaved<TestType>, shardsim::LayerNormSaved<TestType>>);

  // Nonzero mean: x = [1, 2, 3, 4], eps = 0. LayerNorm centers (mean 2.5): y_0 < 0 and the row
  // sums to 0; RMSNorm does not center: every y_i > 0.
  const auto x = make<TestType>(Shape({{"seq", 1}, {"hidden", 4}}), {1, 2, 3, 4});
  shardsim::LayerNormParams ln_params;
  ln_params.eps = 0;
  RmsNormParams rms_params;
  rms_params.eps = 0;
  Tensor<TestType> y_ln;
  Tensor<TestType> y_rms;
  shardsim::LayerNormSaved<TestType> ln_saved;
  RmsNormSaved<TestType> rms_saved;
  shardsim::layer_norm_forward<TestType>(x, nullptr, nullptr, ln_params, y_ln, ln_saved);
  shardsim::rms_norm_forward<TestType>(x, nullptr, rms_params, y_rms, rms_saved);
  CHECK(y_ln[0] < TestType(0));
  CHECK(y_rms[0] > TestType(0));
  for (int i = 0; i < 4; ++i) CHECK(y_ln[i] != y_rms[i]);
  // rstd = 1/sqrt(1.25) = 0.894 vs rrms = 1/sqrt(7.5) = 0.365: different statistics too.
  CHECK(ln_saved.rstd[0] != rms_saved.rrms[0]);

  // Zero mean: x = [2, -2, 2, -2]. mean = 0 exactly, var = mean(x^2) = 4, so both ops compute
  // (x - 0) * 0.5 and (x * 0.5): bitwise equal. The difference above is exactly the mean.
  const auto centered = make<TestType>(Shape({{"seq", 1}, {"hidden", 4}}), {2, -2, 2, -2});
  shardsim::layer_norm_forward<TestType>(centered, nullptr, nullptr, ln_params, y_ln, ln_saved);
  shardsim::rms_norm_forward<TestType>(centered, nullptr, rms_params, y_rms, rms_saved);
  for (int i = 0; i < 4; ++i) CHECK(y_ln[i] == y_rms[i]);
}

TEMPLATE_TEST_CASE("rms_norm_backward: parameter grads accumulate, activation grads are written",
                   "[rms_norm]", float, double, Mp) {
  shardsim::set_mp_precision(256);
  const Shape shape({{"batch", 2}, {"hidden", 5}});
  const auto x = seeded<TestType>(shape, tensor_test::normal(0.5, 2.0), 1);
  const auto dy = seeded<TestType>(shape, tensor_test::normal(0.0, 1.0), 2);
  const auto w = seeded<TestType>(Shape({{"hidden", 5}}), tensor_test::uniform(0.5, 1.5), 3);
  RmsNormParams params;
  Tensor<TestType> y;
  RmsNormSaved<TestType> saved;
  shardsim::rms_norm_forward(x, &w, params, y, saved);
  Tensor<TestType> dx;
  Tensor<TestType> dw(w.shape());
  shardsim::rms_norm_backward(dy, x, &w, saved, params, dx, &dw);
  Tensor<TestType> dx_again;
  Tensor<TestType> dw_twice = dw;
  shardsim::rms_norm_backward(dy, x, &w, saved, params, dx_again, &dw_twice);
  // Adding the same value to itself is exact (a doubling).
  for (std::int64_t i = 0; i < dw.numel(); ++i) CHECK(dw_twice[i] == dw[i] + dw[i]);
  for (std::int64_t e = 0; e < dx.numel(); ++e) CHECK(dx_again[e] == dx[e]);
}

TEMPLATE_TEST_CASE("row-sharded RMSNorm equals the dense oracle bitwise, forward and dx",
                   "[rms_norm][sharded]", float, double, Mp) {
  shardsim::set_mp_precision(256);
  const Shape shape({{"batch", 2}, {"seq", 13}, {"hidden", 16}});
  const auto x = seeded<TestType>(shape, tensor_test::normal(0.5, 2.0), 11);
  const auto dy = seeded<TestType>(shape, tensor_test::normal(0.0, 1.0), 12);
  const auto w = seeded<TestType>(Shape({{"hidden", 16}}), tensor_test::uniform(0.5, 1.5), 13);
  RmsNormParams params;
  Tensor<TestType> y;
  RmsNormSaved<TestType> saved;
  shardsim::rms_norm_forward(x, &w, params, y, saved);
  Tensor<TestType> dx;
  Tensor<TestType> dw(w.shape());
  shardsim::rms_norm_backward(dy, x, &w, saved, params, dx, &dw);
  for (const Placement& placement :
       {Placement::shard("seq"), Placement::shard("seq", SplitPolicy::balanced),
        Placement::shard("seq", SplitPolicy::padded), Placement::shard("batch"),
        Placement::replicate()}) {
    for (int ranks = 1; ranks <= 5; ++ranks) {
      INFO(placement.str() << " over " << ranks << " ranks");
      const shardsim::World<TestType> world(ranks, shardsim::ReduceOrder::rank, {});
      const auto x_dist = shardsim::distribute("x", x, placement, ranks);
      const auto w_dist = shardsim::distribute("w", w, Placement::replicate(), ranks);
      const auto dy_dist = shardsim::distribute("dy", dy, placement, ranks);
      shardsim::RmsNormShardedSaved<TestType> sharded_saved;
      const DistTensor<TestType> y_dist =
          shardsim::rms_norm_row_sharded(world, x_dist, &w_dist, params, "y", sharded_saved);
      CHECK(tensor_test::matches_bitwise(y_dist, y));
      CHECK(tensor_test::matches_bitwise(sharded_saved.rrms, saved.rrms));
      const auto grads = shardsim::rms_norm_row_sharded_backward(world, dy_dist, x_dist, &w_dist,
                                                                 sharded_saved, params, "dx", "dw");
      CHECK(tensor_test::matches_bitwise(grads.dx, dx));
      if (placement.is_replicate()) {
        // Every rank holds every row and computes the whole dense dweight: a Replicate.
        CHECK(grads.dweight.layout.on(0).is_replicate());
        CHECK(tensor_test::matches_bitwise(grads.dweight, dw));
        continue;
      }
      CHECK(grads.dweight.layout.on(0).is_partial());
      // dweight: the same 26 row terms (pad rows add exact zeros), grouped by rank, then summed
      // in rank order. Any summation order of n terms errs by at most gamma_{n-1} sum|terms|
      // (Higham, Accuracy and Stability, 4.2), so two orders differ by at most
      // 2 (n - 1) u sum|terms| / (1 - (n - 1) u); 2 * 32 u sum|terms| covers n - 1 = 25.
      const Tensor<TestType> summed = tensor_test::partial_sum(grads.dweight);
      for (std::int64_t i = 0; i < 16; ++i) {
        double abs_sum = 0;
        for (std::int64_t row = 0; row < 26; ++row) {
          const std::int64_t at = row * 16 + i;
          abs_sum +=
              std::fabs(tensor_test::to_double(TestType(dy[at] * (x[at] * saved.rrms[row]))));
        }
        const double bound = 2 * 32 * tensor_test::unit_roundoff<TestType>() * abs_sum;
        CHECK(std::fabs(tensor_test::to_double(TestType(summed[i] - dw[i]))) <= bound);
      }
    }
  }
}

TEMPLATE_TEST_CASE("hidden-sharded RMSNorm agrees with the dense oracle", "[rms_norm][sharded]",
                   float, double, Mp) {
  shardsim::set_mp_precision(256);
  const Shape shape({{"batch", 2}, {"seq", 5}, {"hidden", 18}});
  const auto x = seeded<TestType>(shape, tensor_test::normal(0.5, 2.0), 21);
  const auto dy = seeded<TestType>(shape, tensor_test::normal(0.0, 1.0), 22);
  const auto w = seeded<TestType>(Shape({{"hidden", 18}}), tensor_test::uniform(0.5, 1.5), 23);
  RmsNormParams params;
  Tensor<TestType> y;
  RmsNormSaved<TestType> saved;
  shardsim::rms_norm_forward(x, &w, params, y, saved);
  Tensor<TestType> dx;
  Tensor<TestType> dw(w.shape());
  shardsim::rms_norm_backward(dy, x, &w, saved, params, dx, &dw);
  // The partial sums of squares are regrouped by shard. Sums of 18 non-negative terms regrouped:
  // relative error <= 2 * 17 u; the sqrt halves it and the division, the products and dx's
  // all-reduced sum(dnorm * norm) (terms up to ~24 against a result of order 1 to 10) add a few
  // dozen u more. 2^10 u bounds all of them with a wide margin, and is ~2^-246 at mp256, far
  // inside the 2^-(bits-16) of invariant 5 (docs/architecture.md).
  const double tol = 1024 * tensor_test::unit_roundoff<TestType>();
  for (SplitPolicy split : {SplitPolicy::chunk, SplitPolicy::balanced, SplitPolicy::padded}) {
    for (int ranks = 1; ranks <= 5; ++ranks) {
      const Placement placement = Placement::shard("hidden", split);
      INFO(placement.str() << " over " << ranks << " ranks");
      const shardsim::World<TestType> world(ranks, shardsim::ReduceOrder::rank, {});
      const auto x_dist = shardsim::distribute("x", x, placement, ranks);
      const auto w_dist = shardsim::distribute("w", w, placement, ranks);
      const auto dy_dist = shardsim::distribute("dy", dy, placement, ranks);
      shardsim::RmsNormShardedSaved<TestType> sharded_saved;
      const auto y_dist =
          shardsim::rms_norm_hidden_sharded(world, x_dist, &w_dist, params, "y", sharded_saved);
      CHECK(y_dist.layout.on(0) == placement);
      CHECK(tensor_test::normwise_error(sharded_saved.rrms, saved.rrms) <= tol);
      CHECK(tensor_test::normwise_error(y_dist, y) <= tol);
      const auto grads = shardsim::rms_norm_hidden_sharded_backward(
          world, dy_dist, x_dist, &w_dist, sharded_saved, params, "dx", "dw");
      CHECK(grads.dweight.layout.on(0) == placement);  // local: every token of its features
      CHECK(tensor_test::normwise_error(grads.dx, dx) <= tol);
      CHECK(tensor_test::normwise_error(grads.dweight, dw) <= tol);
      if (ranks == 1) CHECK(tensor_test::matches_bitwise(y_dist, y));  // one shard: same order
    }
  }
}

TEST_CASE("the RMSNorm plans record the documented boundary names, in order", "[rms_norm]") {
  // The report prints these names and the step stores the oracle under them: the plans build
  // them with part_name from rms_norm_parts. Entries are "tensor <- dense".
  const Shape shape({{"seq", 3}, {"hidden", 4}});
  const auto x = seeded<double>(shape, tensor_test::normal(0.5, 2.0), 71);
  const auto w = seeded<double>(Shape({{"hidden", 4}}), tensor_test::uniform(0.5, 1.5), 72);
  const auto dy = seeded<double>(shape, tensor_test::normal(0.0, 1.0), 73);
  shardsim::World<double> world(2, shardsim::ReduceOrder::rank, {});
  std::vector<std::string> seen;
  world.set_hook([&](const shardsim::BoundaryLabel& label, const DistTensor<double>&) {
    seen.push_back(label.tensor + " <- " + label.dense_name());
    return true;
  });
  using Names = std::vector<std::string>;
  RmsNormParams params;
  shardsim::RmsNormShardedSaved<double> saved;
  const auto x_tokens = shardsim::distribute("x", x, Placement::shard("seq"), 2);
  const auto w_whole = shardsim::distribute("w", w, Placement::replicate(), 2);
  shardsim::rms_norm_row_sharded(world, x_tokens, &w_whole, params, "y", saved);
  CHECK(seen == Names{"y.rrms <- y.rrms", "y <- y"});
  seen.clear();
  const Placement features = Placement::shard("hidden");
  const auto x_dist = shardsim::distribute("x", x, features, 2);
  const auto w_dist = shardsim::distribute("w", w, features, 2);
  shardsim::rms_norm_hidden_sharded(world, x_dist, &w_dist, params, "y", saved);
  const auto dy_dist = shardsim::distribute("grad(y)", dy, features, 2);
  shardsim::rms_norm_hidden_sharded_backward(world, dy_dist, x_dist, &w_dist, saved, params,
                                             "grad(x)", "grad(w)");
  CHECK(seen == Names{"y.sumsq <- y.sumsq", "y.rrms <- y.rrms", "y <- y",
                      "grad(y).sum_dnorm_norm <- grad(y).sum_dnorm_norm"});
}
