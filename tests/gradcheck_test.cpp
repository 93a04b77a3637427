// Gradient checks (STYLE.md tier b): the analytic backward of layer_norm, rms_norm and the masked
// MSE loss against central finite differences computed in mp.
//
// Precision and step: 256 bits (unit roundoff u = 2^-257) and h = 2^-60. For a scalar loss L,
//   (L(p + h) - L(p - h)) / 2h = L'(p) + (h^2 / 6) L'''(xi)          (truncation, O(h^2))
// and the two evaluations carry rounding errors of about c u |L| each, divided by 2h:
//   error <= (h^2 / 6) |L'''| + c u |L| / h  ~  2^-120 |L'''| + c 2^-197 |L|.
// The inputs are O(1) with rstd O(1), so the third derivatives of these smooth maps are at most
// O(10^3) (~2^10) and the losses O(10^2): the total is below ~2^-108. We require 2^-100 relative
// to (1 + |gradient|), a margin of 2^8, and 2^48 below f64's epsilon (2^-52): an analytic
// gradient that were only right to double precision would fail.
#include <catch2/catch.hpp>
#include <functional>

#include "ops/layer_norm/layer_norm.hpp"
#include "ops/loss/loss.hpp"
#include "ops/rms_norm/rms_norm.hpp"
#include "tensor_test_support.hpp"

using shardsim::Mp;
using shardsim::Shape;
using shardsim::Tensor;
using tensor_test::seeded;

namespace {

const Mp& step() {
  static const Mp h = ldexp(Mp(1), -60);
  return h;
}

const Mp& tolerance() {
  static const Mp tol = ldexp(Mp(1), -100);
  return tol;
}

// Checks grad against central differences of loss() in each element of *arg.
void check_gradient(const char* what, Tensor<Mp>* arg, const Tensor<Mp>& grad,
                    const std::function<Mp()>& loss) {
  REQUIRE(arg->numel() == grad.numel());
  for (std::int64_t e = 0; e < grad.numel(); ++e) {
    const Mp saved = (*arg)[e];
    (*arg)[e] = saved + step();
    const Mp up = loss();
    (*arg)[e] = saved - step();
    const Mp down = loss();
    (*arg)[e] = saved;
    const Mp numeric = (up - down) / (2 * step());
    INFO(what << " element " << e << ": analytic " << grad[e] << ", numeric " << numeric);
    CHECK(abs(numeric - grad[e]) <= tolerance() * (1 + abs(grad[e])));
  }
}

Mp weighted_sum(const Tensor<Mp>& a, const Tensor<Mp>& b) {
  Mp sum = 0;
  for (std::int64_t e = 0; e < a.numel(); ++e) sum += a[e] * b[e];
  return sum;
}

}  // namespace

TEST_CASE("gradcheck: layer_norm dx, dweight, dbias", "[gradcheck][layer_norm][mp]") {
  shardsim::set_mp_precision(256);
  // L = sum(dy * y): its gradient with respect to y is dy, so backward(dy) is dL/d(x, w, b).
  // The normalized axis is the middle one ([batch, hidden, seq]), so the named-axis indexing is
  // exercised with inner > 1; eps is tiny but nonzero.
  const Shape shape({{"batch", 2}, {"hidden", 5}, {"seq", 3}});
  const Shape param({{"hidden", 5}});
  auto x = seeded<Mp>(shape, tensor_test::normal(0.5, 2.0), 71);
  const auto dy = seeded<Mp>(shape, tensor_test::normal(0.0, 1.0), 72);
  auto w = seeded<Mp>(param, tensor_test::uniform(0.5, 1.5), 73);
  auto b = seeded<Mp>(param, tensor_test::uniform(-0.25, 0.25), 74);
  shardsim::LayerNormParams params;
  params.eps = 1e-5;
  auto loss = [&] {
    Tensor<Mp> y;
    shardsim::LayerNormSaved<Mp> saved;
    shardsim::layer_norm_forward(x, &w, &b, params, y, saved);
    return weighted_sum(dy, y);
  };
  Tensor<Mp> y;
  shardsim::LayerNormSaved<Mp> saved;
  shardsim::layer_norm_forward(x, &w, &b, params, y, saved);
  Tensor<Mp> dx;
  Tensor<Mp> dw(param);
  Tensor<Mp> db(param);
  shardsim::layer_norm_backward(dy, x, &w, saved, params, dx, &dw, &db);
  check_gradient("dx", &x, dx, loss);
  check_gradient("dweight", &w, dw, loss);
  check_gradient("dbias", &b, db, loss);
}

TEST_CASE("gradcheck: the hidden-sharded backward building blocks reproduce layer_norm's dx",
          "[gradcheck][layer_norm][mp]") {
  shardsim::set_mp_precision(256);
  // The distributed backward assembles dx from two row sums; split one row [0, 7) into [0, 3) and
  // [3, 7), add the partial sums, and the result must pass the same finite-difference check.
  const Shape shape({{"seq", 2}, {"hidden", 7}});
  const Shape param({{"hidden", 7}});
  auto x = seeded<Mp>(shape, tensor_test::normal(-0.3, 1.5), 75);
  const auto dy = seeded<Mp>(shape, tensor_test::normal(0.0, 1.0), 76);
  const auto w = seeded<Mp>(param, tensor_test::uniform(0.5, 1.5), 77);
  shardsim::LayerNormParams params;
  auto loss = [&] {
    Tensor<Mp> y;
    shardsim::LayerNormSaved<Mp> saved;
    shardsim::layer_norm_forward<Mp>(x, &w, nullptr, params, y, saved);
    return weighted_sum(dy, y);
  };
  Tensor<Mp> y;
  shardsim::LayerNormSaved<Mp> saved;
  shardsim::layer_norm_forward<Mp>(x, &w, nullptr, params, y, saved);
  // Slices as two "ranks" would hold them.
  auto slice = [](const Tensor<Mp>& t, std::int64_t begin, std::int64_t count) {
    Tensor<Mp> out(t.shape().with_extent("hidden", count));
    shardsim::copy_along(t, "hidden", begin, out, 0, count);
    return out;
  };
  const std::int64_t begins[2] = {0, 3};
  const std::int64_t counts[2] = {3, 4};
  Tensor<Mp> sum_dnorm(shape.without("hidden"));
  Tensor<Mp> sum_dnorm_norm(shape.without("hidden"));
  for (int r = 0; r < 2; ++r) {
    Tensor<Mp> s, sn;
    const Tensor<Mp> w_slice = slice(w, begins[r], counts[r]);
    shardsim::layer_norm_backward_sums(slice(dy, begins[r], counts[r]),
                                       slice(x, begins[r], counts[r]), &w_slice, saved, params,
                                       counts[r], s, sn);
    for (std::int64_t row = 0; row < 2; ++row) {
      sum_dnorm[row] += s[row];
      sum_dnorm_norm[row] += sn[row];
    }
  }
  Tensor<Mp> dx(shape);
  for (int r = 0; r < 2; ++r) {
    Tensor<Mp> dx_slice;
    const Tensor<Mp> w_slice = slice(w, begins[r], counts[r]);
    shardsim::layer_norm_backward_apply<Mp>(
        slice(dy, begins[r], counts[r]), slice(x, begins[r], counts[r]), &w_slice, saved, sum_dnorm,
        sum_dnorm_norm, 7, params, counts[r], dx_slice, nullptr, nullptr);
    shardsim::copy_along(dx_slice, "hidden", 0, dx, begins[r], counts[r]);
  }
  check_gradient("distributed dx", &x, dx, loss);
}

TEST_CASE("gradcheck: rms_norm dx, dweight", "[gradcheck][rms_norm][mp]") {
  shardsim::set_mp_precision(256);
  const Shape shape({{"batch", 2}, {"seq", 2}, {"hidden", 6}});
  const Shape param({{"hidden", 6}});
  auto x = seeded<Mp>(shape, tensor_test::normal(0.5, 2.0), 81);
  const auto dy = seeded<Mp>(shape, tensor_test::normal(0.0, 1.0), 82);
  auto w = seeded<Mp>(param, tensor_test::uniform(0.5, 1.5), 83);
  shardsim::RmsNormParams params;
  auto loss = [&] {
    Tensor<Mp> y;
    shardsim::RmsNormSaved<Mp> saved;
    shardsim::rms_norm_forward(x, &w, params, y, saved);
    return weighted_sum(dy, y);
  };
  Tensor<Mp> y;
  shardsim::RmsNormSaved<Mp> saved;
  shardsim::rms_norm_forward(x, &w, params, y, saved);
  Tensor<Mp> dx;
  Tensor<Mp> dw(param);
  shardsim::rms_norm_backward(dy, x, &w, saved, params, dx, &dw);
  check_gradient("dx", &x, dx, loss);
  check_gradient("dweight", &w, dw, loss);
}

TEST_CASE("gradcheck: masked MSE loss, padding tokens get exactly zero", "[gradcheck][loss][mp]") {
  shardsim::set_mp_precision(256);
  // L = (1/V) sum over valid tokens of sum_h (y - t)^2, V = 5 + 2 = 7 of 10 tokens. Central
  // differences of a quadratic have no truncation error (L''' = 0), only rounding.
  const Shape shape({{"batch", 2}, {"seq", 5}, {"hidden", 3}});
  auto y = seeded<Mp>(shape, tensor_test::normal(0.0, 1.0), 91);
  const auto target = seeded<Mp>(shape, tensor_test::uniform(-1, 1), 92);
  shardsim::MaskedMseParams params;
  params.valid_lengths = {5, 2};
  auto loss = [&] {
    Mp sum;
    std::int64_t count = 0;
    shardsim::masked_mse_partial(y, target, params, {}, sum, count);
    return Mp(sum / count);
  };
  Tensor<Mp> dy;
  shardsim::masked_mse_backward(y, target, params, {}, Mp(7), dy);
  check_gradient("dy", &y, dy, loss);
  // Tokens (1, 2..4) are padding: their gradient is exactly 0, and so is the numeric one.
  const auto view = shardsim::AxisView::of(shape, "hidden");
  for (std::int64_t s = 2; s < 5; ++s) {
    for (std::int64_t h = 0; h < 3; ++h) CHECK(dy[view.flat(5 + s, h, 0)] == 0);
  }
}
