// Tests for the position signatures (signatures.hpp): rank_offset_gap, shard_edge_gap,
// shifted_copy, rope_rotation and window_mask, each on synthetic tensors with known answers.
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>

#include "diagnosis/signatures.hpp"

using shardsim::Cause;
using shardsim::Observed;
using shardsim::Placement;
using shardsim::Shape;

namespace {

const double kF64 = std::ldexp(1.0, -53);

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// [seq=n] Shard(seq) over `ranks`, dense values p^2 + 1 (all distinct).
Observed ramp(std::int64_t n, int ranks) {
  std::vector<double> dense;
  for (std::int64_t p = 0; p < n; ++p) dense.push_back(double(p * p + 1));
  return shardsim::observed_of("t", Shape({{"seq", n}}), Placement::shard("seq"), ranks, dense);
}

// Adds `delta` to every element rank `rank` holds.
void shift_rank(Observed& o, int rank, double delta) {
  for (double& v : o.ranks[static_cast<std::size_t>(rank)]) v += delta;
}

}  // namespace

TEST_CASE("rank_offset_gap: exact at offset 0, off on every other rank", "[diagnosis]") {
  // 8 positions over 4 ranks (2 each): offsets 0, 2, 4, 6.
  Observed o = ramp(8, 4);
  for (int r = 1; r < 4; ++r) shift_rank(o, r, r);  // gaps 1, 2, 3: growing with the offset
  const auto f = shardsim::rank_offset_gap(o);
  CHECK(f.cause == Cause::position_offset);
  CHECK(f.confidence == 0.7);
  CHECK(has(f.evidence, "nonzero on all 3 ranks at a nonzero offset"));
  CHECK(has(f.evidence, "growing with the offset"));
  shift_rank(o, 0, 1);  // the rank at offset 0 differs too: not an offset pattern
  CHECK_FALSE(shardsim::rank_offset_gap(o).present());
}

TEST_CASE("rank_offset_gap: says nothing about zigzag shares of two runs", "[diagnosis]") {
  // 8 positions over 2 ranks, zigzag: pieces [0,2) [2,4) [4,6) [6,8); rank 0 holds [0,2) and
  // [6,8), rank 1 [2,6) (its two pieces adjacent). Rank 0 exact and rank 1 off is what a ring
  // merge bug gives (only rank 1 merges); a position counted from the shard's start would move
  // rank 0's far run too, so the pattern is no evidence of one.
  std::vector<double> dense;
  for (int p = 0; p < 8; ++p) dense.push_back(double(p * p + 1));
  Observed o = shardsim::observed_of(
      "t", Shape({{"seq", 8}}), Placement::shard("seq", shardsim::SplitPolicy::zigzag), 2, dense);
  shift_rank(o, 1, 1);
  const auto f = shardsim::rank_offset_gap(o);
  CHECK_FALSE(f.present());
  CHECK(has(f.evidence, "zigzag"));
}

TEST_CASE("shard_edge_gap: differences only next to the edges between shards", "[diagnosis]") {
  // 12 positions over 3 ranks (4 each): edges between positions 3|4 and 7|8.
  Observed o = ramp(12, 3);
  shardsim::set_held(o, 0, 3, -1);
  shardsim::set_held(o, 2, 8, -1);
  const auto f = shardsim::shard_edge_gap(o);
  CHECK(f.present());
  CHECK(has(f.evidence, "seq positions 3,8"));
  shardsim::set_held(o, 0, 1, -1);  // position 1 is interior
  CHECK_FALSE(shardsim::shard_edge_gap(o).present());
}

TEST_CASE("shifted_copy: a rank holding the dense values of other positions", "[diagnosis]") {
  // 8 positions over 2 ranks; rank 1 (positions 4..7) holds positions 0..3's dense values, as
  // a rank indexing a position table with local positions would: shift -4.
  Observed o = ramp(8, 2);
  for (std::int64_t p = 4; p < 8; ++p) shardsim::set_held(o, 1, p, double((p - 4) * (p - 4) + 1));
  const auto f = shardsim::shifted_copy(o, kF64);
  CHECK(f.cause == Cause::position_offset);
  CHECK(f.confidence == 0.75);
  CHECK(has(f.evidence, "rank 1: -4"));
  shardsim::set_held(o, 1, 7, 1000);  // one value from nowhere breaks it
  CHECK_FALSE(shardsim::shifted_copy(o, kF64).present());
}

namespace {

// [kv=4, head_dim=4] keys rotated (rotate_half, theta 10000: inv_freq 1 and 0.01) at `pos(p)`.
std::vector<double> rotated(const std::function<double(int)>& pos) {
  const double raw[4][4] = {{1, 2, 3, 4}, {-1, 0.5, 2, -3}, {0.25, -2, 1, 1}, {3, 1, -1, 2}};
  const double freq[2] = {1, 0.01};
  std::vector<double> out(16);
  for (int p = 0; p < 4; ++p) {
    for (int i = 0; i < 2; ++i) {
      const double a = raw[p][i], b = raw[p][i + 2], angle = pos(p) * freq[i];
      out[p * 4 + i] = a * std::cos(angle) - b * std::sin(angle);
      out[p * 4 + i + 2] = b * std::cos(angle) + a * std::sin(angle);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("rope_rotation: keys rotated at local positions, or shifted by a constant",
          "[diagnosis]") {
  const Shape shape({{"kv", 4}, {"head_dim", 4}});
  const std::vector<double> dense = rotated([](int p) { return double(p); });
  shardsim::RopeGeometry rope;
  rope.pos_axis = "kv";
  rope.max_shift = 16;
  // Shard(kv) over 2 ranks: rank 1 holds positions 2, 3 and rotates them at 0, 1, i.e. by -2,
  // minus its offset.
  Observed local = shardsim::observed_of("k", shape, Placement::shard("kv"), 2, dense);
  const std::vector<double> at_local = rotated([](int p) { return double(p % 2); });
  local.ranks[1].assign(at_local.begin() + 8, at_local.end());
  const auto f = shardsim::rope_rotation(local, rope, kF64);
  CHECK(f.confidence == 0.95);
  CHECK(has(f.evidence, "minus their shard's offset along kv"));
  // Every key rotated 3 positions too far (Replicate): one shift +3.
  Observed shifted = shardsim::observed_of("k", shape, Placement::replicate(), 2, dense);
  for (auto& r : shifted.ranks) r = rotated([](int p) { return p + 3.0; });
  const auto g = shardsim::rope_rotation(shifted, rope, kF64);
  CHECK(g.confidence == 0.9);
  CHECK(has(g.evidence, "one position shift +3 along kv"));
  // Scaled, not rotated: pair norms differ.
  for (auto& r : shifted.ranks) {
    for (double& v : r) v *= 1.5;
  }
  CHECK_FALSE(shardsim::rope_rotation(shifted, rope, kF64).present());
}

TEST_CASE("window_mask: the lse of a window bound off by one", "[diagnosis]") {
  // One batch and head, 3 queries and 3 keys (no cache), head_dim 2, window 2: query i sees keys
  // j with 0 <= i - j < 2. q = k = rows (1,0), (0,1), (1,1); scores q.k / sqrt(2).
  const double s = 1 / std::sqrt(2.0);
  const std::vector<double> rows{1, 0, 0, 1, 1, 1};
  const Shape qs({{"batch", 1}, {"seq", 3}, {"head", 1}, {"head_dim", 2}});
  const Shape ks({{"batch", 1}, {"kv", 3}, {"head", 1}, {"head_dim", 2}});
  const Observed q = shardsim::observed_of("q", qs, Placement::replicate(), 1, rows);
  const Observed k = shardsim::observed_of("k", ks, Placement::replicate(), 1, rows);
  // Dense: i=0 {k0}: s; i=1 {k0, k1}: log(e^0 + e^s); i=2 {k1, k2}: log(e^s + e^2s).
  // With q - k <= 2 query 2 also sees k0 (score s): log(2 e^s + e^2s).
  const std::vector<double> dense{s, std::log(1 + std::exp(s)),
                                  std::log(std::exp(s) + std::exp(2 * s))};
  Observed lse = shardsim::observed_of("lse", Shape({{"batch", 1}, {"seq", 3}, {"head", 1}}),
                                       Placement::shard("seq"), 2, dense);
  shardsim::set_held(lse, 1, 2, std::log(2 * std::exp(s) + std::exp(2 * s)));
  shardsim::AttentionCase c{&lse, &q, &k, 2};
  const auto f = shardsim::window_mask(c, kF64);
  CHECK(f.confidence == 0.95);
  CHECK(has(f.evidence, "0 <= q - k <= 2, the window bound off by one"));
  shardsim::set_held(lse, 1, 2, 7.0);  // a value no mask gives
  CHECK_FALSE(shardsim::window_mask(c, kF64).present());
}

TEST_CASE("ring_merge: only the rows that merged KV blocks are wrong", "[diagnosis]") {
  // lse [batch=1, seq=6, head=1] Shard(seq) over 2 ranks, no cache (kv = 6), window 3. The KV
  // axis is torch.chunk'ed into blocks [0, 3) and [3, 6). Query i attends keys i-2 .. i:
  // i = 0, 1, 2 -> block 0 only; i = 3 (keys 1..3) and i = 4 (keys 2..4) -> both blocks;
  // i = 5 (keys 3..5) -> block 1 only. Rank 0 holds rows 0..2, rank 1 rows 3..5.
  const Shape shape({{"batch", 1}, {"seq", 6}, {"head", 1}});
  const std::vector<double> dense{1, 2, 3, 4, 5, 6};
  auto with_wrong_rows = [&](const std::vector<std::int64_t>& rows) {
    Observed o = shardsim::observed_of("y.lse", shape, Placement::shard("seq"), 2, dense);
    for (std::int64_t row : rows) {
      shardsim::set_held(o, row < 3 ? 0 : 1, row, dense[static_cast<std::size_t>(row)] + 0.5);
    }
    return o;
  };
  auto finding = [&](const Observed& o) {
    return shardsim::ring_merge({.o = &o, .kv = 6, .window = 3, .group = 2}, kF64);
  };
  // Both merged rows off, every single-block row exact: a merge bug.
  const Observed merge_bug = with_wrong_rows({3, 4});
  const shardsim::Finding present = finding(merge_bug);
  CHECK(present.present());
  CHECK(present.cause == Cause::softmax_merge);
  CHECK(has(present.evidence, "one KV block: 0 of 4 elements off"));
  CHECK(has(present.evidence, "two or more: 2 of 2"));
  // A single-block row off too: not (only) the merge.
  CHECK_FALSE(finding(with_wrong_rows({1, 3, 4})).present());
  // One of the two merged rows: no more than half, as a mask bound moved by one would do.
  CHECK_FALSE(finding(with_wrong_rows({3})).present());
  // A merge without the running max: one merged row's lse overflowed to +inf (the oracle's is
  // finite), however few rows that is; the single-block rows are exact. No mask or position bug
  // gives +inf from finite logits, so this alone names the merge.
  Observed overflow = with_wrong_rows({});
  shardsim::set_held(overflow, 1, 3, HUGE_VAL);
  const shardsim::Finding overflowed = finding(overflow);
  CHECK(overflowed.cause == Cause::softmax_merge);
  CHECK(overflowed.confidence == 0.95);
  CHECK(has(overflowed.evidence, "1 merged values are +inf where the oracle is finite"));
  shardsim::set_held(overflow, 1, 3, -HUGE_VAL);  // -inf: a row left with no key, not overflow
  CHECK_FALSE(finding(overflow).present());
  shardsim::set_held(overflow, 1, 3, HUGE_VAL);
  shardsim::set_held(overflow, 0, 1, 2.5);  // a single-block row off as well: not the merge alone
  CHECK_FALSE(finding(overflow).present());
  // Nothing off, or no geometry: absent.
  CHECK_FALSE(finding(with_wrong_rows({})).present());
  CHECK_FALSE(shardsim::ring_merge({}, kF64).present());
}
