// Tests for the diagnosis signatures of training, randomness and streaming (signatures.hpp):
// replica_drift, mask_pattern, chunk_onset and provenance, on synthetic tensors and traces.
#include <catch2/catch.hpp>
#include <cmath>

#include "diagnosis/signatures.hpp"
#include "core/rng.hpp"

using shardsim::Cause;
using shardsim::Observed;
using shardsim::Placement;
using shardsim::Shape;
using shardsim::Status;

namespace {

const double kF64 = std::ldexp(1.0, -53);

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("replica_drift: each replica stepped with its own share, or its group's", "[diagnosis]") {
  const Shape shape({{"hidden", 3}});
  const Observed before = shardsim::observed_of("w", shape, Placement::replicate(), 1, {1, 1, 1});
  // Rank r's share g_r = (r + 1, 2 (r + 1), 3); lr = 0.5.
  auto shares_of = [&](int ranks) {
    Observed g = shardsim::observed_of("grad(w)", shape, Placement::partial(), ranks, {0, 0, 0});
    for (int r = 0; r < ranks; ++r) g.ranks[r] = {r + 1.0, 2 * (r + 1.0), 3.0};
    return g;
  };
  const Observed shares = shares_of(3);
  Observed after = shardsim::observed_of("w@replicas", shape, Placement::replicate(), 3, {0, 0, 0});
  for (int r = 0; r < 3; ++r) {
    for (int e = 0; e < 3; ++e) after.ranks[r][e] = 1 - 0.5 * shares.ranks[r][e];
  }
  const auto own = shardsim::replica_drift(after, &before, &shares, kF64);
  CHECK(own.cause == Cause::unreduced_gradients);
  CHECK(own.confidence == 0.95);
  // Rank 2's second element: 1 - 0.5 * 6 = -2 against rank 0's 1 - 0.5 * 2 = 0.
  CHECK(has(own.evidence, "replicas of w differ (max 2 from rank 0's)"));
  CHECK(has(own.evidence, "= 0.5 x its own rank's gradient share"));
  // Four ranks reduced in pairs {0,1}, {2,3}: each steps with its pair's sum.
  const Observed four = shares_of(4);
  Observed pairs = shardsim::observed_of("w", shape, Placement::replicate(), 4, {0, 0, 0});
  for (int r = 0; r < 4; ++r) {
    const int first = r / 2 * 2;
    for (int e = 0; e < 3; ++e) {
      pairs.ranks[r][e] = 1 - 0.5 * (four.ranks[first][e] + four.ranks[first + 1][e]);
    }
  }
  const auto group = shardsim::replica_drift(pairs, &before, &four, kF64);
  CHECK(group.confidence == 0.9);
  CHECK(has(group.evidence, "contiguous group of 2 ranks"));
  CHECK(shardsim::replica_drift(after, nullptr, nullptr, kF64).confidence == 0.45);
  for (auto& r : after.ranks) r = after.ranks[0];  // replicas agree
  CHECK_FALSE(shardsim::replica_drift(after, &before, &shares, kF64).present());
}

namespace {

// 0/1 keep bits of `n` words of Philox stream `seed` from index `first`: p = 0.5.
std::vector<double> bits(std::uint64_t seed, std::uint64_t first, std::size_t n) {
  std::vector<double> out;
  for (std::size_t i = 0; i < n; ++i) {
    out.push_back(shardsim::dropout_word(seed, 1, 1, first + i) >= 0x80000000u ? 1.0 : 0.0);
  }
  return out;
}

}  // namespace

TEST_CASE("mask_pattern: repetition flags, independent masks, shifted masks", "[diagnosis]") {
  // The detector flagged (0, 1): seed repetition, quoting its note.
  Observed check = shardsim::observed_of("y.mask@repetition", Shape({{"rank", 2}, {"peer", 2}}),
                                         Placement::shard("rank"), 2, {0, 0, 0, 0});
  check.ranks[0][1] = 1;
  check.entry.notes = {"ranks 0,1: 64 of 64 words equal at offset 0 (chance 2^-2042): REPEATED"};
  const Shape shape({{"seq", 64}, {"hidden", 4}});
  Observed mask =
      shardsim::observed_of("y.mask", shape, Placement::shard("seq"), 4, bits(1, 0, 256));
  const auto repeated = shardsim::mask_pattern(mask, &check);
  CHECK(repeated.cause == Cause::seed_repetition);
  CHECK(has(repeated.evidence, "flags 1 pairs of ranks; ranks 0,1: 64 of 64 words"));
  // Every rank draws its own stream (seeds 100 + r): each agrees with the dense mask about half
  // the time, chance q^2 + (1 - q)^2 ~ 0.5, with ~128 expected disagreements.
  for (int r = 0; r < 4; ++r) mask.ranks[r] = bits(100 + r, 0, 64);
  const auto independent = shardsim::mask_pattern(mask, nullptr);
  CHECK(independent.cause == Cause::rank_seed_offset);
  CHECK(independent.confidence == 0.85);
  CHECK(has(independent.evidence, "4 of 4 differing ranks at chance"));
  // Rank 1 (global 64..127) holds the dense bits of 0..63: the dense mask shifted by -64.
  mask = shardsim::observed_of("y.mask", shape, Placement::shard("seq"), 4, bits(1, 0, 256));
  mask.ranks[1] = bits(1, 0, 64);
  const auto shifted = shardsim::mask_pattern(mask, nullptr);
  CHECK(shifted.cause == Cause::position_offset);
  CHECK(has(shifted.evidence,
            "rank 1's mask equals the dense mask at flat positions shifted by -64"));
  // Not a mask at all.
  Observed values =
      shardsim::observed_of("y", Shape({{"seq", 2}}), Placement::replicate(), 1, {0.5, 2});
  CHECK_FALSE(shardsim::mask_pattern(values, nullptr).present());
}

TEST_CASE("chunk_onset: exact in chunk 1, diverging from chunk 2 at the carried cache",
          "[diagnosis]") {
  using T = shardsim::TraceStatus;
  std::vector<T> trace{
      {0, 1, 1, "input", "x", Status::exact},       {1, 1, 1, "rope", "k", Status::exact},
      {2, 1, 1, "attention", "y", Status::within},  {3, 1, 2, "input", "x", Status::exact},
      {4, 1, 2, "kv_cache", "cache", Status::fail}, {5, 1, 2, "rope", "k", Status::fail}};
  const auto cache = shardsim::chunk_onset(trace, 4);
  CHECK(cache.cause == Cause::cache_convention);
  CHECK(cache.confidence == 0.8);
  CHECK(has(cache.evidence,
            "chunk 2 diverges first at #4 cache (kv_cache), a boundary chunk 1 "
            "does not have"));
  // The cache matches; the rope of chunk 2 is first, a boundary chunk 1 has: no cause named (a
  // window bound or a position that chunk 1 could not exercise shows the same way).
  trace[4].status = Status::exact;
  const auto later = shardsim::chunk_onset(trace, 5);
  CHECK_FALSE(later.present());
  CHECK(has(later.evidence, "after the carried state (cache) matched"));
  trace[1].status = Status::fail;  // chunk 1 diverges too
  CHECK_FALSE(shardsim::chunk_onset(trace, 5).present());
  CHECK_FALSE(shardsim::chunk_onset(trace, 1).present());  // a chunk-1 divergence
}

TEST_CASE("provenance: sharded values that are another boundary's dense values", "[diagnosis]") {
  const Shape shape({{"kv", 6}});
  Observed raw = shardsim::observed_of("y.k", shape, Placement::replicate(), 1,
                                       {1.5, 2.25, -3.125, 4.0625, 0.75, -0.375});
  raw.entry.id = 7;
  Observed cache = shardsim::observed_of("y.cache_k", shape, Placement::replicate(), 2,
                                         {9.5, 8.25, 7.125, 6.0625, 5.75, 4.375});
  for (auto& r : cache.ranks) r = raw.dense;  // the cache holds y.k's values
  const auto carried = shardsim::provenance(cache, {&raw}, true);
  CHECK(carried.cause == Cause::cache_convention);
  CHECK(carried.confidence == 0.95);
  CHECK(has(carried.evidence,
            "12 of 12 differing sharded values of y.cache_k are, bit for bit, "
            "dense values of y.k (#7"));
  CHECK(shardsim::provenance(cache, {&raw}, false).cause == Cause::wrong_stage);
  for (auto& r : cache.ranks) r[0] = r[1] = 11.0;  // 8 of 12 found: below 90%
  CHECK_FALSE(shardsim::provenance(cache, {&raw}, true).present());
}
