// Tests for world.hpp: redistribute round trips for every placement pair, the documented reduce
// orders, rendezvous checks and the scheduler.
#include <algorithm>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/mp.hpp"
#include "core/scalar.hpp"
#include "dist_test_support.hpp"
#include "core/world.hpp"

using shardsim::DistTensor;
using shardsim::Placement;
using shardsim::ReduceOrder;
using shardsim::Schedule;
using shardsim::Shape;
using shardsim::SplitPolicy;
using shardsim::Tensor;
using shardsim::World;

namespace {

using dist_test::assemble;
using dist_test::bitwise_equal;

// [batch=2, seq=n, hidden=3] with distinct, nonzero, exactly representable values e + 1 + 1/4
// (so no value is a signed zero, whose sign a sum with +0 would lose).
template <typename T>
Tensor<T> distinct_tensor(std::int64_t seq) {
  Tensor<T> t(Shape({{"batch", 2}, {"seq", seq}, {"hidden", 3}}));
  for (std::int64_t e = 0; e < t.numel(); ++e) t[e] = T(static_cast<double>(e) + 1.25);
  return t;
}

const std::vector<Placement>& all_placements() {
  static const std::vector<Placement> placements = {
      Placement::shard("seq"),    Placement::shard("seq", SplitPolicy::balanced),
      Placement::shard("seq", SplitPolicy::padded), Placement::shard("hidden"),
      Placement::replicate(),     Placement::partial(),
      Placement::shard("seq", SplitPolicy::zigzag), Placement::shard("hidden", SplitPolicy::zigzag),
  };
  return placements;
}

}  // namespace

TEMPLATE_TEST_CASE("redistribute between every pair of placements and back is exact", "[world]",
                   float, double, shardsim::Mp) {
  shardsim::set_mp_precision(256);
  for (ReduceOrder order : {ReduceOrder::rank, ReduceOrder::ring, ReduceOrder::tree}) {
    for (int ranks = 1; ranks <= 5; ++ranks) {
      const World<TestType> world(ranks, order, Schedule{});
      for (std::int64_t seq : {1, 3, 7, 13}) {
        const Tensor<TestType> original = distinct_tensor<TestType>(seq);
        for (const Placement& from : all_placements()) {
          const DistTensor<TestType> start = shardsim::distribute("t", original, from, ranks);
          REQUIRE(bitwise_equal(assemble(start), original));
          for (const Placement& to : all_placements()) {
            INFO("order " << shardsim::reduce_order_name(order) << ", ranks " << ranks << ", seq "
                          << seq << ": " << from.str() << " -> " << to.str());
            const DistTensor<TestType> there = world.redistribute(start, to, {});
            CHECK(there.layout.on(0) == to);
            CHECK(there.global == original.shape());
            CHECK(bitwise_equal(assemble(there), original));
            const DistTensor<TestType> back = world.redistribute(there, from, {});
            CHECK(back.layout.on(0) == from);
            CHECK(bitwise_equal(assemble(back), original));
          }
        }
      }
    }
  }
}

TEST_CASE("redistribute reports each collective to the hook with its metadata", "[world]") {
  World<double> world(4, ReduceOrder::rank, Schedule{});
  std::vector<std::string> seen;
  world.set_hook([&](const shardsim::BoundaryLabel& label, const DistTensor<double>& t) {
    seen.push_back(label.op + ":" + label.tensor + ":" + t.layout.on(0).str());
    return true;
  });
  const auto start = shardsim::distribute("x", distinct_tensor<double>(13), Placement::shard("seq"), 4);
  world.redistribute(start, Placement::replicate(), {});
  world.redistribute(start, Placement::shard("hidden"), {});
  CHECK(seen == std::vector<std::string>{"all_gather:x:Replicate", "all_to_all:x:Shard(hidden)"});
}

TEMPLATE_TEST_CASE("all_reduce gives every rank bitwise rank 0's result", "[world]", float, double,
                   shardsim::Mp) {
  shardsim::set_mp_precision(256);
  for (ReduceOrder order : {ReduceOrder::rank, ReduceOrder::ring, ReduceOrder::tree}) {
    for (int ranks = 1; ranks <= 5; ++ranks) {
      const World<TestType> world(ranks, order, Schedule{});
      DistTensor<TestType> partial = shardsim::make_dist<TestType>(
          "p", Shape({{"seq", 7}, {"hidden", 3}}), Placement::partial(), ranks);
      // Addends of mixed magnitude so that rounding happens: (r + 1) * 0.1 * (e + 1)^3.
      for (int r = 0; r < ranks; ++r) {
        for (std::int64_t e = 0; e < partial.local(r).numel(); ++e) {
          partial.local(r)[e] = TestType(0.1 * (r + 1) * double((e + 1) * (e + 1) * (e + 1)));
        }
      }
      const DistTensor<TestType> reduced = world.all_reduce(partial, {});
      REQUIRE(reduced.layout.on(0).is_replicate());
      for (int r = 1; r < ranks; ++r) {
        for (std::int64_t e = 0; e < reduced.local(0).numel(); ++e) {
          CHECK(shardsim::ScalarTraits<TestType>::identical(reduced.local(r)[e],
                                                            reduced.local(0)[e]));
        }
      }
    }
  }
}

namespace {

// all_reduce over 4 ranks of a 4-element buffer where rank r holds addends[r] everywhere.
template <typename T>
std::vector<T> reduce_four(ReduceOrder order, const T (&addends)[4]) {
  const World<T> world(4, order, Schedule{});
  DistTensor<T> partial =
      shardsim::make_dist<T>("p", Shape({{"hidden", 4}}), Placement::partial(), 4);
  for (int r = 0; r < 4; ++r) {
    for (int e = 0; e < 4; ++e) partial.local(r)[e] = addends[r];
  }
  return world.all_reduce(partial, {}).local(0).values();
}

}  // namespace

TEST_CASE("reduce orders follow their documented definitions", "[world]") {
  // Addends x0 = 1e8, x1 = 1, x2 = -1e8, x3 = 1 (all exact in float; ulp(1e8) = 8 in float, so
  // 1e8 + 1 rounds back to 1e8 and -1e8 + 1 rounds back to -1e8).
  const float xs[4] = {1e8f, 1.0f, -1e8f, 1.0f};
  // rank: ((x0 + x1) + x2) + x3 = ((1e8 + 1) - 1e8) + 1 = (1e8 - 1e8) + 1 = 1.
  CHECK(reduce_four(ReduceOrder::rank, xs) == std::vector<float>{1, 1, 1, 1});
  // ring: n = 4 elements, k = 4, chunk c = 1, so element e is chunk j = e, summed from rank
  // (j+1) mod 4 around the ring:
  //   j=0: ((x1 + x2) + x3) + x0 = ((1 - 1e8) + 1) + 1e8 = (-1e8 + 1) + 1e8 = 0
  //   j=1: ((x2 + x3) + x0) + x1 = ((-1e8 + 1) + 1e8) + 1 = 0 + 1 = 1
  //   j=2: ((x3 + x0) + x1) + x2 = ((1 + 1e8) + 1) - 1e8 = 0
  //   j=3: ((x0 + x1) + x2) + x3 = 1 (the rank order)
  // (Starting at rank j instead of j+1 would give {1, 0, 1, 0}.)
  CHECK(reduce_four(ReduceOrder::ring, xs) == std::vector<float>{0, 1, 0, 1});
  // tree: [0,4) -> [0,2) + [2,4) = (x0 + x1) + (x2 + x3) = 1e8 + (-1e8) = 0.
  CHECK(reduce_four(ReduceOrder::tree, xs) == std::vector<float>{0, 0, 0, 0});
  // In double every partial sum is exact, so every order gives the true sum 2.
  const double xd[4] = {1e8, 1.0, -1e8, 1.0};
  for (ReduceOrder order : {ReduceOrder::rank, ReduceOrder::ring, ReduceOrder::tree}) {
    CHECK(reduce_four(order, xd) == std::vector<double>{2, 2, 2, 2});
  }
}

TEST_CASE("tree order splits at mid = lo + ceil((hi - lo) / 2)", "[world]") {
  // k = 3: [0,3) -> [0,2) + [2,3) = (x0 + x1) + x2. With x = {1, 1e8, -1e8} in float:
  // (1 + 1e8) - 1e8 = 0, whereas x0 + (x1 + x2) = 1 would mean mid = 1.
  const World<float> world(3, ReduceOrder::tree, Schedule{});
  const float x[3] = {1.0f, 1e8f, -1e8f};
  std::vector<const float*> addends = {&x[0], &x[1], &x[2]};
  CHECK(world.reduce_sum(addends, 1) == std::vector<float>{0.0f});
  // k = 5: [0,5) -> [0,3) + [3,5) = ((x0 + x1) + x2) + (x3 + x4). With x = {1, 1e8, 1, -1e8, 1}:
  // ((1 + 1e8) + 1) + (-1e8 + 1) = 1e8 + (-1e8) = 0, while the rank order gives
  // (((1 + 1e8) + 1) - 1e8) + 1 = 1.
  const World<float> five(5, ReduceOrder::tree, Schedule{});
  const float y[5] = {1.0f, 1e8f, 1.0f, -1e8f, 1.0f};
  std::vector<const float*> y_addends = {&y[0], &y[1], &y[2], &y[3], &y[4]};
  CHECK(five.reduce_sum(y_addends, 1) == std::vector<float>{0.0f});
  const World<float> five_rank(5, ReduceOrder::rank, Schedule{});
  CHECK(five_rank.reduce_sum(y_addends, 1) == std::vector<float>{1.0f});
}

namespace {

const std::vector<int> kAll4{0, 1, 2, 3};  // the group of a 1-D world of 4

// The calls every rank would make for an all_gather of `t` (all consistent).
std::vector<shardsim::CallDesc> good_calls(const DistTensor<double>& t) {
  std::vector<shardsim::CallDesc> calls;
  for (int r = 0; r < t.ranks(); ++r) {
    calls.push_back({r, "all_gather", "f64", t.global, t.layout,
                     shardsim::Layout({Placement::replicate()}), t.local(r).shape()});
  }
  return calls;
}

}  // namespace

TEST_CASE("rendezvous rejects mismatched calls and names the ranks", "[world]") {
  using Catch::Contains;
  const World<double> world(4, ReduceOrder::rank, Schedule{});
  const auto t = shardsim::distribute("x", distinct_tensor<double>(13), Placement::shard("seq"), 4);
  REQUIRE_NOTHROW(world.rendezvous(kAll4, good_calls(t)));

  SECTION("a different collective on one rank") {
    auto calls = good_calls(t);
    calls[2].collective = "all_reduce";
    CHECK_THROWS_AS(world.rendezvous(kAll4, calls), shardsim::RendezvousError);
    CHECK_THROWS_WITH(world.rendezvous(kAll4, calls),
                      Contains("ranks 0,1,3 called") && Contains("ranks 2 called all_reduce"));
  }
  SECTION("rank 0 is the odd one out: the majority is the reference, rank 0 is blamed") {
    auto calls = good_calls(t);
    calls[0].collective = "broadcast";
    CHECK_THROWS_WITH(world.rendezvous(kAll4, calls), Contains("ranks 1,2,3 called all_gather") &&
                                                          Contains("ranks 0 called broadcast"));
  }
  SECTION("a different global shape on one rank") {
    auto calls = good_calls(t);
    calls[1].global = t.global.with_extent("seq", 12);
    calls[1].local = calls[1].global.with_extent("seq", 3);
    CHECK_THROWS_WITH(world.rendezvous(kAll4, calls),
                      Contains("ranks 1 called") && Contains("seq=12"));
  }
  SECTION("a local shape that does not match the placement") {
    auto calls = good_calls(t);
    calls[3].local = t.global.with_extent("seq", 4);  // rank 3 owns seq[12:13): 1 position
    CHECK_THROWS_WITH(world.rendezvous(kAll4, calls),
                      Contains("rank 3 contributes local [batch=2, seq=4, hidden=3]") &&
                          Contains("[batch=2, seq=1, hidden=3]"));
  }
  SECTION("a missing rank") {
    auto calls = good_calls(t);
    calls.erase(calls.begin() + 1);
    CHECK_THROWS_WITH(world.rendezvous(kAll4, calls), Contains("missing ranks: 1"));
  }
  SECTION("a rank that arrives twice while another is missing") {
    auto calls = good_calls(t);
    calls[3] = calls[0];
    CHECK_THROWS_AS(world.rendezvous(kAll4, calls), shardsim::RendezvousError);
    CHECK_THROWS_WITH(world.rendezvous(kAll4, calls),
                      Contains("missing ranks: 3") && Contains("more than once: 0"));
  }
  SECTION("a rank outside the group") {
    auto calls = good_calls(t);
    calls[3].rank = 7;
    CHECK_THROWS_WITH(world.rendezvous(kAll4, calls),
                      Contains("missing ranks: 3") && Contains("outside the group: 7"));
  }
  SECTION("a collective on a tensor whose local disagrees with its placement") {
    auto broken = t;
    broken.local(1) = Tensor<double>(t.global.with_extent("seq", 2));
    CHECK_THROWS_WITH(world.all_gather(broken, {}), Contains("rank 1 contributes local"));
  }
}

TEST_CASE("schedule_order: rank, reverse and seeded shuffles are reproducible permutations",
          "[world]") {
  using shardsim::schedule_order;
  CHECK(schedule_order({Schedule::Kind::rank, 0}, 4) == std::vector<int>{0, 1, 2, 3});
  CHECK(schedule_order({Schedule::Kind::reverse, 0}, 4) == std::vector<int>{3, 2, 1, 0});
  for (int ranks = 1; ranks <= 5; ++ranks) {
    std::vector<int> identity(static_cast<std::size_t>(ranks));
    for (int r = 0; r < ranks; ++r) identity[static_cast<std::size_t>(r)] = r;
    for (const char* text : {"rank", "reverse", "shuffle:0", "shuffle:7", "shuffle:12345"}) {
      const Schedule schedule = shardsim::parse_schedule(text);
      CHECK(schedule.str() == text);
      std::vector<int> order = schedule_order(schedule, ranks);
      CHECK(order == schedule_order(shardsim::parse_schedule(text), ranks));  // reproducible
      std::sort(order.begin(), order.end());
      CHECK(order == identity);  // a permutation
    }
  }
  // Seeded shuffles do shuffle: over 20 seeds at 5 ranks (120 orders), not all are the same,
  // and not all are the identity.
  std::vector<std::vector<int>> orders;
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    orders.push_back(schedule_order({Schedule::Kind::shuffle, seed}, 5));
  }
  CHECK(std::count(orders.begin(), orders.end(), orders.front()) < 20);
  CHECK(std::count(orders.begin(), orders.end(), std::vector<int>{0, 1, 2, 3, 4}) < 20);
  for (const char* bad : {"shuffle:", "shuffle:x", "random", "shuffle:-1"}) {
    CHECK_THROWS_AS(shardsim::parse_schedule(bad), shardsim::InputError);
  }
}
