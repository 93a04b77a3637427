// Tests for ops/gelu.hpp and ops/gelu_plan.hpp: exact values at 0, the published normal cdf at 1,
// both forms against a 256-bit reference, finite-difference gradients in mp, and the elementwise
// sharded plan equal to the dense oracle bit for bit under every placement.
#include "ops/gelu/gelu.hpp"

#include <catch2/catch.hpp>
#include <string>
#include <type_traits>

#include "ops/add/add_plan.hpp"
#include "ops/gelu/gelu_plan.hpp"
#include "tensor_test_support.hpp"

using shardsim::GeluApprox;
using shardsim::GeluParams;
using shardsim::Mp;
using shardsim::Placement;
using shardsim::Shape;
using shardsim::Tensor;
using tensor_test::assemble;
using tensor_test::bitwise_equal;
using tensor_test::make;

namespace {

GeluParams form(GeluApprox approx) {
  GeluParams p;
  p.approximate = approx;
  return p;
}

// The definitions, evaluated directly at the current mp precision with MPFR's correctly rounded
// functions and the decimal constant 0.044715 read exactly.
Mp reference_gelu(const Mp& x, GeluApprox approx) {
  if (approx == GeluApprox::none) return x / 2 * (1 + erf(x / sqrt(Mp(2))));
  const Mp k = sqrt(2 / boost::multiprecision::acos(Mp(-1)));
  return x / 2 * (1 + tanh(k * (x + Mp("0.044715") * x * x * x)));
}

template <typename T>
T rounded(const Mp& v) {
  if constexpr (std::is_same_v<T, float>) {
    return shardsim::round_to_f32(v);
  } else {
    return shardsim::round_to_f64(v);
  }
}

}  // namespace

TEMPLATE_TEST_CASE("gelu(0) = 0 and gelu'(0) = 1/2 exactly, in both forms", "[gelu]", float, double,
                   Mp) {
  shardsim::set_mp_precision(256);
  // At 0: erf(0) = tanh(0) = 0, so y = (0 * 0.5) * 1 = 0; the slope is 0.5 * (1 + 0) plus
  // 0 times the second term, and dx = 3 * 0.5 = 1.5, all exact.
  for (GeluApprox approx : {GeluApprox::none, GeluApprox::tanh}) {
    const auto x = make<TestType>(Shape({{"hidden", 1}}), {0});
    Tensor<TestType> y, dx;
    shardsim::gelu_forward(x, form(approx), y);
    shardsim::gelu_backward(make<TestType>(x.shape(), {3}), x, form(approx), dx);
    CHECK(y[0] == TestType(0));
    CHECK(dx[0] == TestType(1.5));
  }
}

TEST_CASE("erf-form gelu(1) is the standard normal cdf at 1", "[gelu]") {
  // GELU(x) = x Phi(x), and Phi(1) = 0.841344746068542948585... (Abramowitz & Stegun, table
  // 26.1). The f64 evaluation makes about six roundings plus libm's erf (<= 1 ulp in glibc), each
  // a relative error of at most 2^-53 amplified by at most 1: within 8 ulps.
  const auto x = make<double>(Shape({{"hidden", 1}}), {1});
  Tensor<double> y;
  shardsim::gelu_forward(x, form(GeluApprox::none), y);
  CHECK(shardsim::ulp_distance(y[0], 0.841344746068542948585) <= 8);
}

TEMPLATE_TEST_CASE("gelu forward agrees with a 256-bit reference", "[gelu]", float, double) {
  shardsim::set_mp_precision(256);
  // Error budget at the points below (no point where 1 + erf or 1 + tanh cancels badly, the
  // worst being x = -1 where 1 + t ~ 0.32 amplifies t's error by ~2.2): the argument carries at
  // most ~5 roundings (x^3, c x^3, x + ..., k from pi, 2/pi and sqrt, the product), libm's
  // erf/tanh add <= 2 ulps, then 1 + t and the product one rounding each: under 20 u relative,
  // i.e. under 20 ulps. 32 ulps leaves room; a wrong constant or form is off by far more.
  const std::vector<double> points{-1, -0.5, 0.25, 0.5, 1, 2, 3};
  const auto x = make<TestType>(Shape({{"hidden", 7}}), points);
  for (GeluApprox approx : {GeluApprox::none, GeluApprox::tanh}) {
    Tensor<TestType> y;
    shardsim::gelu_forward(x, form(approx), y);
    for (std::size_t i = 0; i < points.size(); ++i) {
      INFO(shardsim::gelu_approx_name(approx) << " at x = " << points[i]);
      const TestType want = rounded<TestType>(reference_gelu(Mp(points[i]), approx));
      CHECK(shardsim::ulp_distance(y[static_cast<std::int64_t>(i)], want) <= 32);
    }
  }
  // The two forms are different functions: at x = 1 they differ by ~1.5e-4, far above rounding.
  Tensor<TestType> erf_y, tanh_y;
  shardsim::gelu_forward(x, form(GeluApprox::none), erf_y);
  shardsim::gelu_forward(x, form(GeluApprox::tanh), tanh_y);
  CHECK(std::fabs(double(erf_y[4]) - double(tanh_y[4])) > 1e-4);
}

TEST_CASE("gelu at mp256 agrees with the reference to 2^-240", "[gelu][mp]") {
  shardsim::set_mp_precision(256);
  // A dozen correctly rounded 257-bit operations: 2^-240 relative leaves 2^16 ulps of margin.
  const std::vector<double> points{-2, -0.75, 0.125, 1, 4};
  const auto x = make<Mp>(Shape({{"hidden", 5}}), points);
  for (GeluApprox approx : {GeluApprox::none, GeluApprox::tanh}) {
    Tensor<Mp> y;
    shardsim::gelu_forward(x, form(approx), y);
    for (std::size_t i = 0; i < points.size(); ++i) {
      const Mp want = reference_gelu(Mp(points[i]), approx);
      CHECK(abs(y[static_cast<std::int64_t>(i)] - want) <= ldexp(Mp(1), -240) * abs(want));
    }
  }
}

// Central differences at 256 bits with h = 2^-70: the truncation error is h^2 |f'''| / 6 (|f'''|
// < 2 here) ~ 2^-141, the rounding error |f| 2^-256 / h ~ 2^-184. 2^-130 bounds both.
TEST_CASE("gelu backward matches finite differences in mp", "[gelu][mp]") {
  shardsim::set_mp_precision(256);
  const std::vector<double> points{-3, -1, -0.5, 0, 0.3, 1, 2.5};
  const Mp h = ldexp(Mp(1), -70);
  for (GeluApprox approx : {GeluApprox::none, GeluApprox::tanh}) {
    const auto x = make<Mp>(Shape({{"hidden", 7}}), points);
    Tensor<Mp> dx;
    shardsim::gelu_backward(make<Mp>(x.shape(), std::vector<double>(7, 1.0)), x, form(approx), dx);
    for (std::size_t i = 0; i < points.size(); ++i) {
      INFO(shardsim::gelu_approx_name(approx) << " at x = " << points[i]);
      Tensor<Mp> xp(Shape({{"hidden", 1}})), xm(Shape({{"hidden", 1}})), yp, ym;
      xp[0] = Mp(points[i]) + h;
      xm[0] = Mp(points[i]) - h;
      shardsim::gelu_forward(xp, form(approx), yp);
      shardsim::gelu_forward(xm, form(approx), ym);
      const Mp numeric = (yp[0] - ym[0]) / (2 * h);
      CHECK(abs(numeric - dx[static_cast<std::int64_t>(i)]) <= ldexp(Mp(1), -130));
    }
  }
}

TEMPLATE_TEST_CASE("sharded gelu equals the dense oracle bitwise under every placement", "[gelu]",
                   float, double, Mp) {
  shardsim::set_mp_precision(256);
  const Shape shape({{"batch", 2}, {"seq", 7}, {"ffn", 5}});
  const Tensor<TestType> x = tensor_test::seeded<TestType>(shape, -3, 3, 31);
  const Tensor<TestType> dy = tensor_test::seeded<TestType>(shape, -1, 1, 32);
  for (GeluApprox approx : {GeluApprox::none, GeluApprox::tanh}) {
    Tensor<TestType> y, dx;
    shardsim::gelu_forward(x, form(approx), y);
    shardsim::gelu_backward(dy, x, form(approx), dx);
    std::vector<Placement> placements = tensor_test::shards_of("seq");
    for (const Placement& p : tensor_test::shards_of("ffn")) placements.push_back(p);
    placements.push_back(Placement::replicate());
    for (int ranks = 1; ranks <= 5; ++ranks) {
      const shardsim::World<TestType> world(ranks, shardsim::ReduceOrder::rank,
                                            shardsim::Schedule{});
      for (const Placement& p : placements) {
        INFO(ranks << " ranks, " << p.str());
        const auto sx = shardsim::distribute("x", x, p, ranks);
        CHECK(bitwise_equal(assemble(shardsim::gelu_sharded(world, sx, form(approx), "y")), y));
        const auto sdy = shardsim::distribute("grad(y)", dy, p, ranks);
        CHECK(bitwise_equal(
            assemble(shardsim::gelu_backward_sharded(world, sdy, sx, form(approx), "grad(x)")),
            dx));
      }
      // A Partial gradient of a Replicate input stays Partial: gelu' is applied to each addend.
      const auto sx = shardsim::distribute("x", x, Placement::replicate(), ranks);
      const auto sdy = shardsim::distribute("grad(y)", dy, Placement::partial(), ranks);
      REQUIRE(shardsim::elementwise_grad_target(sx.layout.on(0), sdy.layout.on(0)).is_partial());
      const auto sdx = shardsim::gelu_backward_sharded(world, sdy, sx, form(approx), "grad(x)");
      CHECK(sdx.layout.on(0).is_partial());
      // distribute() puts the whole Partial value on rank 0 and zeros elsewhere, and
      // gelu'(x) * 0 = 0, so the addends still sum to dx exactly.
      CHECK(bitwise_equal(assemble(sdx), dx));
    }
  }
}
