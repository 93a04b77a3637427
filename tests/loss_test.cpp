// Tests for ops/loss.hpp and ops/loss_plan.hpp: the masked MSE loss over valid tokens, divided
// once by the global valid-token count; sharded == dense for every token placement; padding
// contributes nothing; and the loss faults (loss_averaged_twice, padding_in_loss,
// average_of_rank_means, wrong_axis) do what their names say, and only where they can show.
#include "ops/loss/loss.hpp"

#include <catch2/catch.hpp>

#include "core/world.hpp"
#include "ops/loss/loss_plan.hpp"
#include "tensor_test_support.hpp"

using shardsim::DistTensor;
using shardsim::LossFaults;
using shardsim::MaskedMseParams;
using shardsim::Mp;
using shardsim::Placement;
using shardsim::Shape;
using shardsim::SplitPolicy;
using shardsim::Tensor;
using tensor_test::make;
using tensor_test::seeded;

// Known answer. batch = 2, seq = 3, hidden = 2, target = 0, valid_lengths = [3, 1]:
//   y[0] = [[1, 2], [3, 4], [5, 6]]    all 3 tokens valid: 1+4 + 9+16 + 25+36 = 91
//   y[1] = [[7, 8], [9, 9], [9, 9]]    1 valid token: 49 + 64 = 113; (1, 1), (1, 2) are padding
//   V = 4, loss = (91 + 113) / 4 = 51 (exact); dy = 2 y / 4 = y / 2 on valid tokens, 0 on pads.
TEMPLATE_TEST_CASE("masked MSE known answer", "[loss]", float, double, Mp) {
  shardsim::set_mp_precision(256);
  const Shape shape({{"batch", 2}, {"seq", 3}, {"hidden", 2}});
  const auto y = make<TestType>(shape, {1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 9, 9});
  const Tensor<TestType> target(shape);
  MaskedMseParams params;
  params.valid_lengths = {3, 1};
  TestType sum;
  std::int64_t count = 0;
  shardsim::masked_mse_partial(y, target, params, {}, sum, count);
  CHECK(sum == TestType(204));
  CHECK(count == 4);
  Tensor<TestType> dy;
  shardsim::masked_mse_backward(y, target, params, {}, TestType(4), dy);
  for (std::int64_t e = 0; e < 8; ++e) CHECK(dy[e] == y[e] / TestType(2));
  for (std::int64_t e = 8; e < 12; ++e) CHECK(dy[e] == TestType(0));  // padding: no gradient
}

TEMPLATE_TEST_CASE("sharded masked MSE equals the dense loss for every token placement",
                   "[loss][sharded]", float, double, Mp) {
  shardsim::set_mp_precision(256);
  const Shape shape({{"batch", 2}, {"seq", 13}, {"hidden", 4}});
  const auto y = seeded<TestType>(shape, tensor_test::normal(0.0, 1.0), 51);
  const auto target = seeded<TestType>(shape, tensor_test::uniform(-1, 1), 52);
  MaskedMseParams params;
  params.valid_lengths = {13, 6};
  TestType dense_sum;
  std::int64_t dense_count = 0;
  shardsim::masked_mse_partial(y, target, params, {}, dense_sum, dense_count);
  REQUIRE(dense_count == 19);
  const TestType dense_loss = dense_sum / TestType(dense_count);
  Tensor<TestType> dense_dy;
  shardsim::masked_mse_backward(y, target, params, {}, TestType(dense_count), dense_dy);
  for (const Placement& placement :
       {Placement::shard("seq"), Placement::shard("seq", SplitPolicy::balanced),
        Placement::shard("seq", SplitPolicy::padded), Placement::shard("batch"),
        Placement::replicate()}) {
    for (int ranks = 1; ranks <= 5; ++ranks) {
      INFO(placement.str() << " over " << ranks << " ranks");
      const shardsim::World<TestType> world(ranks, shardsim::ReduceOrder::rank, {});
      const auto y_dist = shardsim::distribute("y", y, placement, ranks);
      const auto t_dist = shardsim::distribute("t", target, placement, ranks);
      shardsim::LossShardedSaved<TestType> saved;
      const auto loss =
          shardsim::masked_mse_sharded(world, y_dist, t_dist, params, {}, "loss", saved);
      for (int r = 0; r < ranks; ++r) {
        // The global valid count is exact, and every rank divides by it, once.
        CHECK(saved.divisor[static_cast<std::size_t>(r)] == TestType(19));
        // Every rank holds bitwise the same loss (one all-reduce, copied).
        CHECK(shardsim::ScalarTraits<TestType>::identical(loss.local(r)[0], loss.local(0)[0]));
      }
      // The 19 token sums regrouped by rank: two orders of n = 19 non-negative terms differ by
      // at most 2 * 18 u of their sum; one division adds u. 64 u covers it.
      const double gap = std::fabs(tensor_test::to_double(TestType(loss.local(0)[0] - dense_loss)));
      CHECK(gap <=
            64 * tensor_test::unit_roundoff<TestType>() * tensor_test::to_double(dense_loss));
      // dy = 2 (y - t) / V elementwise with the same exact V: bitwise, pads and masked tokens 0.
      const auto dy =
          shardsim::masked_mse_backward_sharded(world, y_dist, t_dist, params, {}, saved, "dy");
      CHECK(tensor_test::matches_bitwise(dy, dense_dy));
    }
  }
}

TEST_CASE("loss faults change the loss exactly as named", "[loss][faults]") {
  const Shape shape({{"batch", 2}, {"seq", 13}, {"hidden", 4}});
  const auto y = seeded<double>(shape, tensor_test::normal(0.0, 1.0), 61);
  const auto target = seeded<double>(shape, tensor_test::uniform(-1, 1), 62);
  MaskedMseParams params;
  params.valid_lengths = {13, 6};
  const int ranks = 4;
  const shardsim::World<double> world(ranks, shardsim::ReduceOrder::rank, {});
  const auto y_dist = shardsim::distribute("y", y, Placement::shard("seq"), ranks);
  const auto t_dist = shardsim::distribute("t", target, Placement::shard("seq"), ranks);
  auto loss_with = [&](const MaskedMseParams& p, const LossFaults& faults) {
    shardsim::LossShardedSaved<double> saved;
    return shardsim::masked_mse_sharded(world, y_dist, t_dist, p, faults, "loss", saved)
        .local(0)[0];
  };
  const double correct = loss_with(params, {});

  // loss_averaged_twice: divided by k = 4 as well. total / (19 * 4) versus (total / 19) / 4:
  // dividing by 4 is exact, and 19 * 4 = 76 is exact, so the two differ by at most one rounding.
  CHECK(loss_with(params, {.averaged_twice = true}) == Approx(correct / 4).epsilon(1e-15));

  // padding_in_loss: the 7 padding tokens of sequence 1 count: equal to the unmasked loss.
  MaskedMseParams unmasked = params;
  unmasked.valid_lengths.clear();
  CHECK(loss_with(params, {.padding_in_loss = true}) == loss_with(unmasked, {}));
  CHECK(loss_with(params, {.padding_in_loss = true}) != correct);

  // average_of_rank_means: chunk gives 4,4,4,1 per sequence; with valid_lengths [13, 6] the ranks
  // hold 8, 6, 4, 1 valid tokens, so the mean of rank means is not the global mean.
  CHECK(std::fabs(loss_with(params, {.average_of_rank_means = true}) - correct) > 1e-3 * correct);
}

TEST_CASE("average_of_rank_means is invisible when every rank holds as many valid tokens",
          "[loss][faults]") {
  // Why its scenario needs uneven shards or padding: 12 tokens over 4 ranks (3 each), all valid.
  // mean_r(S_r / 6) = sum_r S_r / 24 = S / V, the right loss up to rounding.
  const Shape shape({{"batch", 2}, {"seq", 12}, {"hidden", 4}});
  const auto y = seeded<double>(shape, tensor_test::normal(0.0, 1.0), 63);
  const auto target = seeded<double>(shape, tensor_test::uniform(-1, 1), 64);
  const shardsim::World<double> world(4, shardsim::ReduceOrder::rank, {});
  const auto y_dist = shardsim::distribute("y", y, Placement::shard("seq"), 4);
  const auto t_dist = shardsim::distribute("t", target, Placement::shard("seq"), 4);
  shardsim::LossShardedSaved<double> saved;
  const double correct =
      shardsim::masked_mse_sharded(world, y_dist, t_dist, {}, {}, "loss", saved).local(0)[0];
  const double faulty = shardsim::masked_mse_sharded(world, y_dist, t_dist, {},
                                                     {.average_of_rank_means = true}, "loss", saved)
                            .local(0)[0];
  CHECK(faulty == Approx(correct).epsilon(1e-14));  // a few roundings apart at most
}

TEST_CASE("wrong_axis: the [seq, batch] mask applied to [batch, seq] tokens", "[loss][faults]") {
  // B = 2, S = 13, valid_lengths = [13, 9]. Token (b, s) is flat t = 13 b + s and gets the bit of
  // (s', b') = (t / 2, t % 2), valid iff s' < valid_lengths[b']. For b = 1 and even s, t is odd
  // (b' = 1) and s' = (13 + s) / 2 < 9 iff s <= 4: s = 6, 8, 10, 12 are masked. For odd s,
  // b' = 0 and every s' < 13 is valid. All of sequence 0 stays valid (s' <= 6 < 9).
  // The true mask drops (1, 9..12): the bug drops (1, 6), (1, 8) and keeps (1, 9), (1, 11).
  const auto mask = shardsim::seq_major_mask({13, 9}, 2, 13);
  for (int s = 0; s < 13; ++s) CHECK(mask[0][static_cast<std::size_t>(s)] == 1);
  for (int s = 0; s < 13; ++s) {
    INFO("s = " << s);
    const bool masked = s % 2 == 0 && s >= 6;
    CHECK(mask[1][static_cast<std::size_t>(s)] == (masked ? 0 : 1));
  }
  // Without padding the two layouts agree: the bug cannot show.
  for (const auto& row : shardsim::seq_major_mask({}, 2, 13)) {
    for (std::uint8_t bit : row) CHECK(bit == 1);
  }
}

TEST_CASE("an explicit token mask follows the token's global identity across shards", "[loss]") {
  // Mask out exactly token (1, 12), the one rank 3 holds of sequence 1 under chunk 4,4,4,1: the
  // sharded loss must agree with the dense loss that uses the same mask.
  const Shape shape({{"batch", 2}, {"seq", 13}, {"hidden", 3}});
  const auto y = seeded<double>(shape, tensor_test::normal(0.0, 1.0), 65);
  const auto target = seeded<double>(shape, tensor_test::uniform(-1, 1), 66);
  MaskedMseParams params;
  params.token_valid.assign(2, std::vector<std::uint8_t>(13, 1));
  params.token_valid[1][12] = 0;
  double dense_sum;
  std::int64_t dense_count = 0;
  shardsim::masked_mse_partial(y, target, params, {}, dense_sum, dense_count);
  CHECK(dense_count == 25);
  const shardsim::World<double> world(4, shardsim::ReduceOrder::rank, {});
  const auto y_dist = shardsim::distribute("y", y, Placement::shard("seq"), 4);
  const auto t_dist = shardsim::distribute("t", target, Placement::shard("seq"), 4);
  std::int64_t rank3_count = 0;
  double rank3_sum;
  shardsim::masked_mse_partial(y_dist.local(3), t_dist.local(3), params,
                               shardsim::frame_of(y_dist, params, 3), rank3_sum, rank3_count);
  CHECK(rank3_count == 1);  // token (0, 12) only
}
