// Tests for the convention signatures (signatures.hpp): norm_convention recomputes LayerNorm /
// RMSNorm statistics under other conventions, loss_weighting the masked MSE under other token
// weightings; each case is a hand-computed synthetic tensor.
#include <catch2/catch.hpp>
#include <cmath>

#include "diagnosis/signatures.hpp"

using shardsim::Cause;
using shardsim::Observed;
using shardsim::Placement;
using shardsim::Shape;

namespace {

const double kF64 = std::ldexp(1.0, -53);
const double kEps = 1e-5;

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Rows of x [tokens=3, hidden=4]:
//   {1, 2, 3, 4}  mean 2.5  m2 = 2.25 + 0.25 + 0.25 + 2.25 = 5   sum of squares 30
//   {0, 0, 4, 4}  mean 2    m2 = 4 + 4 + 4 + 4 = 16              sum of squares 32
//   {1, 1, 1, 5}  mean 2    m2 = 1 + 1 + 1 + 9 = 12              sum of squares 28
const std::vector<double> kX{1, 2, 3, 4, 0, 0, 4, 4, 1, 1, 1, 5};
const double kMean[3] = {2.5, 2, 2};
const double kM2[3] = {5, 16, 12};

// A [tokens=3] statistic whose dense values are `dense` and sharded values `sharded`.
Observed stat(const std::string& name, std::vector<double> dense, std::vector<double> sharded,
              int ranks = 1) {
  Observed o = shardsim::observed_of(name, Shape({{"tokens", 3}}), Placement::replicate(), ranks,
                                     std::move(dense));
  for (auto& r : o.ranks) r = sharded;
  return o;
}

std::vector<double> rstd_with(double divisor) {
  std::vector<double> out;
  for (double m2 : kM2) out.push_back(1 / std::sqrt(m2 / divisor + kEps));
  return out;
}

}  // namespace

TEST_CASE("norm_convention names the statistic the sharded values follow", "[diagnosis]") {
  const Observed x = shardsim::observed_of("x", Shape({{"tokens", 3}, {"hidden", 4}}),
                                           Placement::replicate(), 1, kX);
  shardsim::NormCase c;
  c.x = &x;
  c.eps = kEps;
  // Unbiased variance: rstd = 1/sqrt(m2/3 + eps).
  const Observed unbiased = stat("y.rstd", rstd_with(4), rstd_with(3));
  c.rstd = &unbiased;
  const auto f = shardsim::norm_convention(c, kF64);
  CHECK(f.cause == Cause::normalization_convention);
  CHECK(f.confidence == 0.95);
  CHECK(has(f.evidence, "the variance divided by H - 1"));
  // eps outside the sqrt: 1/(sqrt(m2/4) + eps).
  std::vector<double> outside;
  for (double m2 : kM2) outside.push_back(1 / (std::sqrt(m2 / 4) + kEps));
  const Observed eps = stat("y.rstd", rstd_with(4), outside);
  c.rstd = &eps;
  CHECK(has(shardsim::norm_convention(c, kF64).evidence, "eps outside the sqrt"));
  // Another eps inside the sqrt: every row implies 1/rstd^2 - var = 1e-3.
  std::vector<double> other_eps;
  for (double m2 : kM2) other_eps.push_back(1 / std::sqrt(m2 / 4 + 1e-3));
  const Observed eps_value = stat("y.rstd", rstd_with(4), other_eps);
  c.rstd = &eps_value;
  CHECK(has(shardsim::norm_convention(c, kF64).evidence,
            "eps = 0.001 inside the sqrt instead of 1e-05"));
  // RMSNorm's statistic: mean 0, rstd = 1/sqrt(sum of squares / 4 + eps) = 1/sqrt(7.5 + eps)...
  const Observed zero = stat("y.mean", {2.5, 2, 2}, {0, 0, 0});
  const Observed rms =
      stat("y.rstd", rstd_with(4),
           {1 / std::sqrt(7.5 + kEps), 1 / std::sqrt(8 + kEps), 1 / std::sqrt(7 + kEps)});
  c.mean = &zero;
  c.rstd = &rms;
  CHECK(has(shardsim::norm_convention(c, kF64).evidence, "RMSNorm's statistic"));
  // One mean for every token: (2.5 + 2 + 2) / 3 = 13/6.
  const Observed pooled = stat("y.mean", {2.5, 2, 2}, {13.0 / 6, 13.0 / 6, 13.0 / 6});
  c.mean = &pooled;
  c.rstd = nullptr;
  CHECK(has(shardsim::norm_convention(c, kF64).evidence, "pooled over all tokens"));
  // The specified statistic itself: nothing else to name.
  const Observed right = stat("y.mean", {2.5, 2, 2}, {2.5, 2, 2});
  c.mean = &right;
  CHECK_FALSE(shardsim::norm_convention(c, kF64).present());
}

TEST_CASE("norm_convention: each rank's slice of the normalized axis alone", "[diagnosis]") {
  // x Shard(hidden) over 2 ranks: rank 0 holds features 0-1, rank 1 features 2-3. The row means
  // of the slices: rank 0 {1.5, 0, 1}, rank 1 {3.5, 4, 3}; the mean is Replicate, so each rank
  // holds its own.
  const Observed x = shardsim::observed_of("x", Shape({{"tokens", 3}, {"hidden", 4}}),
                                           Placement::shard("hidden"), 2, kX);
  Observed mean = stat("y.mean", {kMean[0], kMean[1], kMean[2]}, {}, 2);
  mean.ranks = {{1.5, 0, 1}, {3.5, 4, 3}};
  shardsim::NormCase c;
  c.x = &x;
  c.mean = &mean;
  const auto f = shardsim::norm_convention(c, kF64);
  CHECK(f.confidence == 0.95);
  CHECK(has(f.evidence, "each rank's slice of hidden alone (local instead of global statistics)"));
}

TEST_CASE("norm_convention: a padded slice whose padding zeros are counted", "[diagnosis]") {
  // x [tokens=3, hidden=3] Shard(hidden, padded) over 2 ranks: 2 positions each, rank 1 holds
  // feature 2 and one zero pad. Rows {1,2,3}, {0,0,4}, {1,1,5}: rank 0's slice means
  // {1.5, 0, 1}; rank 1's with its pad counted (3 + 0)/2, (4 + 0)/2, (5 + 0)/2 = {1.5, 2, 2.5}
  // (without the pad they would be {3, 4, 5}).
  const Observed x = shardsim::observed_of(
      "x", Shape({{"tokens", 3}, {"hidden", 3}}),
      Placement::shard("hidden", shardsim::SplitPolicy::padded), 2, {1, 2, 3, 0, 0, 4, 1, 1, 5});
  Observed mean = stat("y.mean", {2, 4.0 / 3, 7.0 / 3}, {}, 2);
  mean.ranks = {{1.5, 0, 1}, {1.5, 2, 2.5}};
  shardsim::NormCase c;
  c.x = &x;
  c.mean = &mean;
  CHECK(has(shardsim::norm_convention(c, kF64).evidence, "its padding zeros counted"));
}

TEST_CASE("loss_weighting: padding counted, axes swapped, rank means, world size", "[diagnosis]") {
  // y [batch=2, seq=3, hidden=1] = {1, 2, 3 | 4, 5, 6}, target 0, valid_lengths {3, 1}, Shard(seq)
  // over 3 ranks (one position each). Squared errors are y^2.
  //   specified: (0,0) (0,1) (0,2) (1,0): sum 1 + 4 + 9 + 16 = 30, count 4, loss 7.5
  //   every token: sum 91, count 6
  //   mask [seq, batch] read as [batch, seq]: token t = 3b + s gets (s', b') = (t / 2, t % 2),
  //     valid for t = 0, 1, 2, 4: (0,0) (0,1) (0,2) (1,1): sum 1 + 4 + 9 + 25 = 39
  //   rank means: rank 0 {(0,0), (1,0)} 17/2, rank 1 {(0,1)} 4, rank 2 {(0,2)} 9: sum 21.5
  //   world size: loss 7.5 / 3 = 2.5
  const Shape shape({{"batch", 2}, {"seq", 3}, {"hidden", 1}});
  const Observed y =
      shardsim::observed_of("y", shape, Placement::shard("seq"), 3, {1, 2, 3, 4, 5, 6});
  const Observed target =
      shardsim::observed_of("t", shape, Placement::shard("seq"), 3, {0, 0, 0, 0, 0, 0});
  auto scalar = [](const std::string& name, double dense, double sharded) {
    Observed o = shardsim::observed_of(name, Shape(), Placement::replicate(), 3, {dense});
    for (auto& r : o.ranks) r = {sharded};
    return o;
  };
  shardsim::LossCase c;
  c.y = &y;
  c.target = &target;
  c.valid_lengths = {3, 1};
  const Observed all_sum = scalar("loss.sum", 30, 91),
                 all_count = scalar("loss.valid_tokens", 4, 6);
  c.sum = &all_sum;
  c.count = &all_count;
  const auto padding = shardsim::loss_weighting(c, kF64);
  CHECK(padding.cause == Cause::padding_not_masked);
  CHECK(has(padding.evidence, "every token, the 2 padding tokens included"));
  // The backward alone: grad(y) = 2 y / 6 on every token (count 6, padding included), where
  // the specified gradient is 2 y / 4 on the 4 valid tokens and 0 on padding.
  Observed grad =
      shardsim::observed_of("grad(y)", shape, Placement::shard("seq"), 3, {0.5, 1, 1.5, 2, 0, 0});
  for (int r = 0; r < 3; ++r) {
    for (int b = 0; b < 2; ++b) shardsim::set_held(grad, r, b * 3 + r, 2.0 * (b * 3 + r + 1) / 6);
  }
  shardsim::LossCase backward = c;
  backward.sum = backward.count = nullptr;
  backward.grad = &grad;
  const auto from_grad = shardsim::loss_weighting(backward, kF64);
  CHECK(from_grad.cause == Cause::padding_not_masked);
  CHECK(has(from_grad.evidence, "reproduces grad(y)"));
  c.count = nullptr;
  const Observed swapped = scalar("loss.sum", 30, 39);
  c.sum = &swapped;
  CHECK(shardsim::loss_weighting(c, kF64).cause == Cause::axis_order);
  const Observed means = scalar("loss.sum", 30, 21.5);
  c.sum = &means;
  const auto rank_means = shardsim::loss_weighting(c, kF64);
  CHECK(rank_means.cause == Cause::wrong_divisor);
  CHECK(has(rank_means.evidence, "each rank's own mean"));
  const Observed twice = scalar("loss", 7.5, 2.5);
  c.sum = nullptr;
  c.loss = &twice;
  CHECK(has(shardsim::loss_weighting(c, kF64).evidence, "divided by the number of ranks (3)"));
  const Observed summed = scalar("loss", 7.5, 30);  // the sum, never divided by the count 4
  c.loss = &summed;
  CHECK(has(shardsim::loss_weighting(c, kF64).evidence, "summed and never divided"));
  const Observed right = scalar("loss", 7.5, 7.5);
  c.loss = &right;
  CHECK_FALSE(shardsim::loss_weighting(c, kF64).present());
}
