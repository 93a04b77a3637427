// Tests for ops/layer_norm.hpp and ops/layer_norm_plan.hpp: a hand-derived known answer, the
// constant-row edge case, a finite-difference gradient check in mp, and the key property that
// sequence-sharded LayerNorm equals the dense oracle bit for bit.
#include "ops/layer_norm/layer_norm.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/mp.hpp"
#include "core/rng.hpp"
#include "core/scalar.hpp"
#include "core/world.hpp"
#include "ops/layer_norm/layer_norm_plan.hpp"
#include "tensor_test_support.hpp"

using shardsim::DistTensor;
using shardsim::LayerNormParams;
using shardsim::LayerNormSaved;
using shardsim::Mp;
using shardsim::Placement;
using shardsim::Shape;
using shardsim::SplitPolicy;
using shardsim::Tensor;

// make, seeded, normal, uniform, unit_roundoff and lane_sum are the normalization tests' shared
// helpers.
using tensor_test::lane_sum;
using tensor_test::make;
using tensor_test::normal;
using tensor_test::seeded;
using tensor_test::uniform;
using tensor_test::unit_roundoff;

namespace {

// A null gradient buffer (the kernels' "not wanted"), typed so the template argument deduces.
template <typename T>
Tensor<T>* nullptr_grad() {
  return nullptr;
}

}  // namespace

// Known answer. x = [1, 2, 3, 4] (hidden = 4), eps = 0, weight = [2, 2, 2, 2], bias = [1, 0, 0, 0]:
//   mean = 10 / 4 = 2.5                                   (exact in binary)
//   var  = ((-1.5)^2 + (-0.5)^2 + 0.5^2 + 1.5^2) / 4 = 5 / 4 = 1.25   (biased; exact)
//   rstd = 1 / sqrt(1.25) = 2 / sqrt(5)
//   y_i  = (x_i - 2.5) * (2 / sqrt(5)) * 2 + b_i = (x_i - 2.5) * 4 / sqrt(5) + b_i
//        = [1 - 6/sqrt(5), -2/sqrt(5), 2/sqrt(5), 6/sqrt(5)]
// The true values are computed at 256 bits and correctly rounded to the test's type.
TEMPLATE_TEST_CASE("layer_norm_forward known answer in f32 and f64", "[layer_norm]", float,
                   double) {
  shardsim::set_mp_precision(256);
  const Shape shape({{"seq", 1}, {"hidden", 4}});
  const auto x = make<TestType>(shape, {1, 2, 3, 4});
  const auto weight = make<TestType>(Shape({{"hidden", 4}}), {2, 2, 2, 2});
  const auto bias = make<TestType>(Shape({{"hidden", 4}}), {1, 0, 0, 0});
  LayerNormParams params;
  params.eps = 0;
  Tensor<TestType> y;
  LayerNormSaved<TestType> saved;
  shardsim::layer_norm_forward(x, &weight, &bias, params, y, saved);
  REQUIRE(saved.mean.shape() == Shape({{"seq", 1}}));
  CHECK(saved.mean[0] == TestType(2.5));  // sum and division are exact

  auto rounded = [](const Mp& v) {
    if constexpr (std::is_same_v<TestType, float>)
      return shardsim::round_to_f32(v);
    else
      return shardsim::round_to_f64(v);
  };
  const Mp sqrt5 = sqrt(Mp(5));
  // rstd: sqrt and the division are each correctly rounded (relative error <= u each), so the
  // result is within 2u of the truth, i.e. at most 2 ulps from the rounded truth.
  CHECK(shardsim::ulp_distance(saved.rstd[0], rounded(2 / sqrt5)) <= 2);
  // y: rstd (2u) times the exact centered value (+u), times 2 (exact), plus the bias (+half an
  // ulp). y_0 = 1 - 6/sqrt(5) = -1.68 cancels 2.68 against 1, magnifying the relative error by
  // 2.68 / 1.68 < 1.6, so 3u * 1.6 + u < 6u: at most 5 ulps. The others have no bias and stay
  // within 3u: at most 3 ulps.
  const Mp expected[4] = {1 - 6 / sqrt5, -2 / sqrt5, 2 / sqrt5, 6 / sqrt5};
  CHECK(shardsim::ulp_distance(y[0], rounded(expected[0])) <= 5);
  for (int i = 1; i < 4; ++i) {
    INFO("i = " << i);
    CHECK(shardsim::ulp_distance(y[i], rounded(expected[i])) <= 3);
  }
  // Antisymmetry of the unbiased entries is exact: (x - mean) is exact, so y_1 = -y_2.
  CHECK(y[1] == -y[2]);
}

TEST_CASE("layer_norm_forward known answer in mp256", "[layer_norm][mp]") {
  shardsim::set_mp_precision(256);
  const auto x = make<Mp>(Shape({{"seq", 1}, {"hidden", 4}}), {1, 2, 3, 4});
  const auto weight = make<Mp>(Shape({{"hidden", 4}}), {2, 2, 2, 2});
  const auto bias = make<Mp>(Shape({{"hidden", 4}}), {1, 0, 0, 0});
  LayerNormParams params;
  params.eps = 0;
  Tensor<Mp> y;
  LayerNormSaved<Mp> saved;
  shardsim::layer_norm_forward(x, &weight, &bias, params, y, saved);
  CHECK(saved.mean[0] == Mp(2.5));
  const Mp sqrt5 = sqrt(Mp(5));
  // A handful of 257-bit operations: 2^-240 relative leaves a margin of 2^16 ulps.
  const Mp tol = ldexp(Mp(1), -240);
  CHECK(abs(saved.rstd[0] - 2 / sqrt5) <= tol * (2 / sqrt5));
  const Mp expected[4] = {1 - 6 / sqrt5, -2 / sqrt5, 2 / sqrt5, 6 / sqrt5};
  for (int i = 0; i < 4; ++i) {
    INFO("i = " << i);
    CHECK(abs(y[i] - expected[i]) <= tol * abs(expected[i]));
  }
}

TEMPLATE_TEST_CASE("a constant row normalizes to exactly the bias", "[layer_norm]", float, double,
                   Mp) {
  shardsim::set_mp_precision(256);
  // x = 1.75 everywhere: the sum 4 * 1.75 = 7 and 7 / 4 = 1.75 are exact, so every centered
  // value is exactly 0 and y = 0 * rstd * w + b = b exactly (with eps = 1e-5, rstd is finite).
  const auto x = make<TestType>(Shape({{"seq", 2}, {"hidden", 4}}),
                                {1.75, 1.75, 1.75, 1.75, 1.75, 1.75, 1.75, 1.75});
  const auto weight = make<TestType>(Shape({{"hidden", 4}}), {0.5, -3, 2, 7});
  const auto bias = make<TestType>(Shape({{"hidden", 4}}), {0.375, -1.5, 2.25, 0.125});
  LayerNormParams params;
  params.eps = 1e-5;
  using std::sqrt;
  Tensor<TestType> y;
  LayerNormSaved<TestType> saved;
  shardsim::layer_norm_forward(x, &weight, &bias, params, y, saved);
  for (std::int64_t row = 0; row < 2; ++row) {
    CHECK(saved.mean[row] == TestType(1.75));
    CHECK(saved.rstd[row] == TestType(1) / sqrt(TestType(0) + TestType(1e-5)));
    for (std::int64_t i = 0; i < 4; ++i) CHECK(y[row * 4 + i] == bias[i]);
  }
}

TEST_CASE("mp256 forward through MPFR in place equals the formula in Boost operators, bitwise",
          "[layer_norm][mp]") {
  shardsim::set_mp_precision(256);
  // The kernel writes through add_into/sub_into/mul_into (MPFR on kept storage, scalar.hpp) so
  // that it allocates nothing per element. Each is one correctly rounded operation, so the result
  // must be bit for bit the header's formula evaluated with Boost's own operators, written out
  // here independently. A second call into the same y (storage kept, prepare_output) must give
  // the same bits, and a y of another shape must be remade. 5 rows: one block of four rows
  // reduced side by side, then a single tail row.
  const Shape shape({{"seq", 5}, {"hidden", 7}});
  const auto x = seeded<Mp>(shape, normal(0.5, 2.0), 21);
  const auto weight = seeded<Mp>(Shape({{"hidden", 7}}), uniform(0.5, 1.5), 22);
  const auto bias = seeded<Mp>(Shape({{"hidden", 7}}), uniform(-0.25, 0.25), 23);
  LayerNormParams params;
  Tensor<Mp> y(Shape({{"seq", 2}, {"hidden", 7}}));  // wrong shape: must be remade
  LayerNormSaved<Mp> saved;
  shardsim::layer_norm_forward(x, &weight, &bias, params, y, saved);
  REQUIRE(y.shape() == shape);
  const Tensor<Mp> first = y;
  shardsim::layer_norm_forward(x, &weight, &bias, params, y, saved);
  for (std::int64_t r = 0; r < 5; ++r) {
    Mp sum = 0;
    for (int i = 0; i < 7; ++i) sum = sum + x[r * 7 + i];
    const Mp mean = sum / Mp(7);
    Mp sum_sq = 0;
    for (int i = 0; i < 7; ++i) sum_sq = sum_sq + (x[r * 7 + i] - mean) * (x[r * 7 + i] - mean);
    const Mp rstd = Mp(1) / sqrt(sum_sq / Mp(7) + Mp(params.eps));
    CHECK(shardsim::ScalarTraits<Mp>::identical(saved.mean[r], mean));
    CHECK(shardsim::ScalarTraits<Mp>::identical(saved.rstd[r], rstd));
    for (int i = 0; i < 7; ++i) {
      INFO("row " << r << " i " << i);
      const Mp expected = ((x[r * 7 + i] - mean) * rstd) * weight[i] + bias[i];
      CHECK(shardsim::ScalarTraits<Mp>::identical(y[r * 7 + i], expected));
      CHECK(shardsim::ScalarTraits<Mp>::identical(first[r * 7 + i], expected));
      CHECK(mpfr_get_prec(y[r * 7 + i].backend().data()) ==
            static_cast<mpfr_prec_t>(shardsim::mp_significand_bits()));
    }
  }
}

TEST_CASE("f64 forward and backward over blocks of rows equal the row-at-a-time formula, bitwise",
          "[layer_norm]") {
  // The kernels reduce four rows side by side (detail::for_each_row), each row's sums in the
  // f64 lane order (lane_sums.hpp: lane i % 8 over ascending i, then ((l0+l1)+(l2+l3)) +
  // ((l4+l5)+(l6+l7)), written out plainly in tensor_test::lane_sum), and accumulate
  // dweight/dbias in row order. The textbook loops below, one row at a time, must agree to the
  // bit. hidden is the middle axis here (inner = 2), so rows are strided (gathered); 3 * 2 = 6
  // rows = one block + 2 tail, and 9 positions = one group of 8 plus a tail of 1.
  const Shape shape({{"seq", 3}, {"hidden", 9}, {"batch", 2}});
  const auto x = seeded<double>(shape, normal(0.5, 2.0), 41);
  const auto dy = seeded<double>(shape, normal(0.0, 1.0), 42);
  const auto w = seeded<double>(Shape({{"hidden", 9}}), uniform(0.5, 1.5), 43);
  const auto b = seeded<double>(Shape({{"hidden", 9}}), uniform(-0.25, 0.25), 44);
  LayerNormParams params;
  Tensor<double> y, dx, dw(w.shape()), db(b.shape());
  LayerNormSaved<double> saved;
  shardsim::layer_norm_forward(x, &w, &b, params, y, saved);
  shardsim::layer_norm_backward(dy, x, &w, saved, params, dx, &dw, &db);
  std::vector<double> ref_dw(9, 0.0), ref_db(9, 0.0);
  for (std::int64_t o = 0; o < 3; ++o) {
    for (std::int64_t j = 0; j < 2; ++j) {
      auto at = [&](std::int64_t i) { return (o * 9 + i) * 2 + j; };
      const double sum = lane_sum(9, [&](int i) { return x[at(i)]; });
      const double mean = sum / 9;
      const double sum_sq =
          lane_sum(9, [&](int i) { return (x[at(i)] - mean) * (x[at(i)] - mean); });
      const double rstd = 1 / std::sqrt(sum_sq / 9 + params.eps);
      CHECK(saved.mean[o * 2 + j] == mean);
      CHECK(saved.rstd[o * 2 + j] == rstd);
      for (int i = 0; i < 9; ++i) CHECK(y[at(i)] == ((x[at(i)] - mean) * rstd) * w[i] + b[i]);
      const double sum_dnorm = lane_sum(9, [&](int i) { return dy[at(i)] * w[i]; });
      const double sum_dnorm_norm =
          lane_sum(9, [&](int i) { return (dy[at(i)] * w[i]) * ((x[at(i)] - mean) * rstd); });
      for (int i = 0; i < 9; ++i) {
        const double norm = (x[at(i)] - mean) * rstd;
        ref_db[i] += dy[at(i)];
        ref_dw[i] += dy[at(i)] * norm;
        CHECK(dx[at(i)] ==
              ((dy[at(i)] * w[i] - sum_dnorm / 9) - norm * (sum_dnorm_norm / 9)) * rstd);
      }
    }
  }
  for (int i = 0; i < 9; ++i) {
    CHECK(dw[i] == ref_dw[i]);
    CHECK(db[i] == ref_db[i]);
  }
}

TEST_CASE("layer_norm_backward matches central finite differences in mp256", "[layer_norm][mp]") {
  shardsim::set_mp_precision(256);
  // Loss L = sum(dy * y). Central differences with step h = 2^-80 have truncation error
  // O(h^2) = 2^-160 and cancellation error ~ 2^-257 / h = 2^-177, so the gradients must agree to
  // about 2^-150 relative to their scale; we allow 2^-140.
  const Shape shape({{"batch", 2}, {"hidden", 5}});
  const Shape param({{"hidden", 5}});
  const auto x = seeded<Mp>(shape, normal(0.5, 2.0), 11);
  const auto dy = seeded<Mp>(shape, normal(0.0, 1.0), 12);
  const auto weight = seeded<Mp>(param, uniform(0.5, 1.5), 13);
  const auto bias = seeded<Mp>(param, uniform(-0.25, 0.25), 14);
  LayerNormParams params;
  auto loss = [&](const Tensor<Mp>& xx, const Tensor<Mp>& w, const Tensor<Mp>& b) {
    Tensor<Mp> y;
    LayerNormSaved<Mp> saved;
    shardsim::layer_norm_forward(xx, &w, &b, params, y, saved);
    Mp sum = 0;
    for (std::int64_t e = 0; e < y.numel(); ++e) sum += dy[e] * y[e];
    return sum;
  };
  Tensor<Mp> y;
  LayerNormSaved<Mp> saved;
  shardsim::layer_norm_forward(x, &weight, &bias, params, y, saved);
  Tensor<Mp> dx;
  Tensor<Mp> dweight(param);
  Tensor<Mp> dbias(param);
  shardsim::layer_norm_backward(dy, x, &weight, saved, params, dx, &dweight, &dbias);

  const Mp h = ldexp(Mp(1), -80);
  const Mp tol = ldexp(Mp(1), -140);
  auto check_gradient = [&](const Tensor<Mp>& grad, int which) {
    for (std::int64_t e = 0; e < grad.numel(); ++e) {
      Tensor<Mp> args[3] = {x, weight, bias};
      args[which][e] += h;
      const Mp up = loss(args[0], args[1], args[2]);
      args[which][e] -= 2 * h;
      const Mp down = loss(args[0], args[1], args[2]);
      const Mp numeric = (up - down) / (2 * h);
      INFO("argument " << which << ", element " << e);
      CHECK(abs(numeric - grad[e]) <= tol * (1 + abs(grad[e])));
    }
  };
  check_gradient(dx, 0);
  check_gradient(dweight, 1);
  check_gradient(dbias, 2);

  // Parameter grads accumulate: a second backward into the same buffer adds the same terms again,
  // giving 2 * dweight up to the rounding of two more additions per element (2^-240 relative is
  // 2^16 ulps of room); overwriting would leave dweight itself.
  Tensor<Mp> dx_again;
  Tensor<Mp> dweight_twice = dweight;
  shardsim::layer_norm_backward(dy, x, &weight, saved, params, dx_again, &dweight_twice,
                                nullptr_grad<Mp>());
  for (std::int64_t i = 0; i < dweight.numel(); ++i) {
    CHECK(abs(dweight_twice[i] - 2 * dweight[i]) <= ldexp(Mp(1), -240) * abs(dweight[i]));
  }
  // Activation grads are overwritten, not accumulated.
  for (std::int64_t e = 0; e < dx.numel(); ++e) CHECK(dx_again[e] == dx[e]);
}

namespace {

// sum over rows of |dy * norm| per hidden index: the scale of the dweight reduction's rounding
// error. x, dy: (batch, seq, hidden=16), the rows contiguous.
template <typename T>
std::vector<T> dweight_term_scale(const Tensor<T>& x, const Tensor<T>& dy,
                                  const LayerNormSaved<T>& saved) {
  using std::abs;
  std::vector<T> scale(16, T(0));  // (hidden)
  const auto view = shardsim::AxisView::of(x.shape(), "hidden");
  for (std::int64_t row = 0; row < view.outer; ++row) {
    for (std::int64_t i = 0; i < 16; ++i) {
      const T norm = (x[view.flat(row, i, 0)] - saved.mean[row]) * saved.rstd[row];
      scale[static_cast<std::size_t>(i)] += abs(dy[view.flat(row, i, 0)] * norm);
    }
  }
  return scale;
}

// The ranks' dweight shares against the dense dweight. Replicate: every rank ran the dense
// computation on the full tensor, so each share is dweight bitwise. Otherwise the same 26 row
// terms (pad rows add exact zeros) are grouped by rank and then summed in rank order. Any
// summation order of n terms errs by at most (n - 1) u sum|terms| (Higham, Accuracy and
// Stability, 4.2), so two orders differ by at most 2 (n - 1) u sum|terms|; we allow
// 2 * 32 u sum|terms|, n - 1 = 25 rounded up for the pad zeros. One rank: same order, bitwise.
template <typename T>
void check_dweight_shares(const std::vector<Tensor<T>>& shares, const Tensor<T>& dweight,
                          const std::vector<T>& term_scale, bool replicate) {
  using std::abs;
  using Traits = shardsim::ScalarTraits<T>;
  if (replicate) {
    for (const auto& share : shares) {
      for (std::int64_t i = 0; i < 16; ++i) CHECK(Traits::identical(share[i], dweight[i]));
    }
    return;
  }
  for (std::int64_t i = 0; i < 16; ++i) {
    T sum = shares[0][i];
    for (std::size_t r = 1; r < shares.size(); ++r) sum += shares[r][i];
    const double bound =
        2 * 32 * unit_roundoff<T>() * Traits::to_double(term_scale[static_cast<std::size_t>(i)]);
    CHECK(Traits::to_double(abs(sum - dweight[i])) <= bound);
    if (shares.size() == 1) CHECK(Traits::identical(sum, dweight[i]));
  }
}

}  // namespace

TEMPLATE_TEST_CASE("row-sharded LayerNorm equals the dense oracle bitwise, forward and backward",
                   "[layer_norm][sharded]", float, double, Mp) {
  shardsim::set_mp_precision(256);
  const Shape shape({{"batch", 2}, {"seq", 13}, {"hidden", 16}});
  const Shape param({{"hidden", 16}});
  // Non-trivial parameters: a plan that assumed weight = 1, bias = 0 would not match.
  const auto x = seeded<TestType>(shape, normal(0.5, 2.0), 101);
  const auto dy = seeded<TestType>(shape, normal(0.0, 1.0), 102);
  const auto weight = seeded<TestType>(param, uniform(0.5, 1.5), 103);
  const auto bias = seeded<TestType>(param, uniform(-0.25, 0.25), 104);
  LayerNormParams params;  // hidden, eps = 1e-5 (so zero pad rows have a finite rstd)

  Tensor<TestType> y;
  LayerNormSaved<TestType> saved;
  shardsim::layer_norm_forward(x, &weight, &bias, params, y, saved);
  Tensor<TestType> dx;
  Tensor<TestType> dweight(param);
  shardsim::layer_norm_backward(dy, x, &weight, saved, params, dx, &dweight,
                                nullptr_grad<TestType>());
  const std::vector<TestType> term_scale = dweight_term_scale(x, dy, saved);

  const std::vector<Placement> placements = {Placement::shard("seq"),
                                             Placement::shard("seq", SplitPolicy::balanced),
                                             Placement::shard("seq", SplitPolicy::padded),
                                             Placement::shard("batch"), Placement::replicate()};
  for (const Placement& placement : placements) {
    for (int ranks = 1; ranks <= 5; ++ranks) {
      INFO(placement.str() << " over " << ranks << " ranks");
      const shardsim::World<TestType> world(ranks, shardsim::ReduceOrder::rank,
                                            shardsim::Schedule{});
      const auto x_dist = shardsim::distribute("x", x, placement, ranks);
      const auto w_dist = shardsim::distribute("w", weight, Placement::replicate(), ranks);
      const auto b_dist = shardsim::distribute("b", bias, Placement::replicate(), ranks);
      shardsim::LayerNormShardedSaved<TestType> sharded_saved;
      const DistTensor<TestType> y_dist = shardsim::layer_norm_row_sharded(
          world, x_dist, &w_dist, &b_dist, params, "y", sharded_saved);
      CHECK(y_dist.layout.on(0) == placement);
      CHECK(tensor_test::matches_bitwise(y_dist, y));
      CHECK(tensor_test::matches_bitwise(sharded_saved.mean, saved.mean));
      CHECK(tensor_test::matches_bitwise(sharded_saved.rstd, saved.rstd));

      // Backward, per rank on its local slices (what a row-sharded backward plan would do).
      const auto dy_dist = shardsim::distribute("dy", dy, placement, ranks);
      DistTensor<TestType> dx_dist = shardsim::make_dist<TestType>("dx", shape, placement, ranks);
      std::vector<Tensor<TestType>> dweight_partials(static_cast<std::size_t>(ranks),
                                                     Tensor<TestType>(param));
      world.for_each_rank([&](int r) {
        const LayerNormSaved<TestType> local_saved{sharded_saved.mean.local(r),
                                                   sharded_saved.rstd.local(r)};
        shardsim::layer_norm_backward(dy_dist.local(r), x_dist.local(r), &w_dist.local(r),
                                      local_saved, params, dx_dist.local(r),
                                      &dweight_partials[static_cast<std::size_t>(r)],
                                      nullptr_grad<TestType>());
      });
      CHECK(tensor_test::matches_bitwise(dx_dist, dx));
      check_dweight_shares(dweight_partials, dweight, term_scale, placement.is_replicate());
    }
  }
}
