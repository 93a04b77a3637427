// Tests for the dropout repetition detector (rng.hpp repeated_streams, ops/dropout_plan.hpp
// repetition_check): it compares drawn 32-bit words, finds identical and shifted streams from a
// handful of positions at any p, and tells a per-rank seed offset (independent words that are
// not the dense program's) from repetition.
#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>

#include "compare/compare.hpp"
#include "core/rng.hpp"
#include "dropout_test_support.hpp"
#include "ops/dropout/dropout.hpp"
#include "ops/dropout/dropout_plan.hpp"
#include "runner/runner.hpp"
#include "scenario/scenario.hpp"

using shardsim::DropoutParams;
using shardsim::DropoutPolicy;
using shardsim::Placement;
using shardsim::Shape;

namespace {

// n words of the dropout stream of `seed` (site 3, pass 1) from flat index `first` on.
std::vector<std::uint32_t> stream(std::uint64_t seed, std::uint64_t first, std::size_t n) {
  std::vector<std::uint32_t> out;
  for (std::size_t i = 0; i < n; ++i) out.push_back(shardsim::dropout_word(seed, 3, 1, first + i));
  return out;
}

DropoutParams params(double p) {
  DropoutParams out;
  out.p = p;
  out.seed = 1234;
  out.stream = 7;
  return out;
}

// Every rank's drawn and dense words for x[batch=2, seq=13, hidden=16] Shard(seq) over `ranks`.
std::vector<shardsim::DrawnWords> rank_words(DropoutPolicy policy, int ranks, double p) {
  const Shape shape({{"batch", 2}, {"seq", 13}, {"hidden", 16}});
  std::vector<shardsim::DrawnWords> words;
  const auto x = shardsim::make_dist<double>("x", shape, Placement::shard("seq"), ranks);
  for (int r = 0; r < ranks; ++r) {
    const auto frame = shardsim::dropout_frame(x, r);
    const Shape local = x.local(r).shape();
    words.push_back(shardsim::dropout_words(local, frame, params(p), policy));
  }
  return words;
}

// `text` with the first `from` replaced by `to` (which must be there).
void replace_first(std::string& text, const std::string& from, const std::string& to) {
  const std::size_t at = text.find(from);
  REQUIRE(at != std::string::npos);
  text.replace(at, from.size(), to);
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

TEST_CASE("identical and shifted word streams are found and independent ones are not",
          "[dropout][repetition]") {
  // Rank 0 and 1: the same 128 words. Rank 2: rank 0's stream from its word 5 on (123 words).
  // Rank 3: a stream of another seed. Rank 4: two words, rank 3's first two.
  const std::vector<std::vector<std::uint32_t>> words{
      stream(1, 0, 128), stream(1, 0, 128), stream(1, 5, 123), stream(2, 0, 64), stream(2, 0, 2)};
  const auto repeats = shardsim::repeated_streams(words);
  REQUIRE(repeats.size() == 5);  // one per rank: each finds its head in some other stream
  CHECK((repeats[0].rank_a == 1 && repeats[0].rank_b == 0 && repeats[0].offset == 0));
  CHECK((repeats[1].rank_a == 0 && repeats[1].rank_b == 1 && repeats[1].equal == 128));
  CHECK((repeats[2].rank_a == 0 && repeats[2].rank_b == 2 && repeats[2].offset == 5));
  CHECK((repeats[2].compared == 123 && repeats[2].equal == 123));
  // Ranks 3 and 4 share two words. Rank 3's head found in rank 4's 2-word stream: chance
  // 2 * 2^-64 = 2^-63; rank 4's in rank 3's 64-word stream: 64 * 2^-64 = 2^-58.
  CHECK((repeats[3].rank_a == 4 && repeats[3].rank_b == 3 && repeats[3].compared == 2));
  CHECK(repeats[3].log2_chance == Approx(-63.0).margin(1e-9));
  CHECK((repeats[4].rank_a == 3 && repeats[4].rank_b == 4 && repeats[4].equal == 2));
  CHECK(repeats[4].log2_chance == Approx(-58.0).margin(1e-9));
  CHECK(repeats[1].str().find("ranks 0,1: 128 of 128 words equal at offset 0") == 0);
  CHECK(repeats[1].str().find("REPEATED") != std::string::npos);
}

TEST_CASE("a stream with padding inside is matched at its words' local positions",
          "[dropout][repetition]") {
  // A padded split of x[batch=3, seq=3, hidden=2] over 2 ranks holds seq 2 per rank: rank 0
  // seq [0, 2), rank 1 seq [2, 3) plus one padding position. Under same_seed both draw by local
  // flat index (b, s, h) -> 4b + 2s + h: rank 0 all 12 indices, rank 1 the six with s = 0,
  // {0, 1, 4, 5, 8, 9}. Rank 1's stream, padding skipped, is words 0, 1, 4, 5, 8, 9 of rank 0's:
  // its head is not a run of rank 0's words, so only the positions find it.
  const std::vector<std::uint32_t> full = stream(5, 0, 12);
  const std::vector<std::int64_t> at{0, 1, 4, 5, 8, 9};
  std::vector<std::uint32_t> short_rank;
  for (std::int64_t i : at) short_rank.push_back(full[static_cast<std::size_t>(i)]);
  const std::vector<std::vector<std::uint32_t>> words{full, short_rank};
  CHECK(shardsim::repeated_streams(words).empty());  // as runs: rank 1's third word is full[4]
  const auto repeats = shardsim::repeated_streams(words, {{}, at});
  // Each finds the other at offset 0 (the same stream): rank 0's words at local indices 0, 1,
  // 4, 5, 8, 9 land on rank 1's six words, its others on rank 1's padding.
  REQUIRE(repeats.size() == 2);
  CHECK((repeats[0].rank_a == 1 && repeats[0].rank_b == 0 && repeats[0].offset == 0));
  CHECK((repeats[1].rank_a == 0 && repeats[1].rank_b == 1 && repeats[1].offset == 0));
  for (const auto& repeat : repeats) CHECK((repeat.compared == 6 && repeat.equal == 6));
  // log2(n_a C(6, 6) 2^-192) with n_a the searched stream's words: 6, then 12.
  CHECK(repeats[0].log2_chance == Approx(std::log2(6.0) - 192.0).margin(1e-9));
  CHECK(repeats[1].log2_chance == Approx(std::log2(12.0) - 192.0).margin(1e-9));
  // A shifted stream with padding: rank 1 holds rank 0's words at local indices + 2.
  std::vector<std::uint32_t> shifted;
  for (std::int64_t i : at) shifted.push_back(full[static_cast<std::size_t>(i + 2)]);
  const auto moved = shardsim::repeated_streams({full, shifted}, {{}, at});
  REQUIRE(!moved.empty());
  CHECK((moved.back().rank_b == 1 && moved.back().offset == 2));
  CHECK((moved.back().compared == 6 && moved.back().equal == 6));
}

TEST_CASE("a single equal word is never evidence and independent streams never repeat",
          "[dropout][repetition]") {
  // One-word streams carry 2^-32 per position: with a 64-word stream to search that is 2^-26,
  // above the 1e-9 (2^-29.9) bar, so it is not flagged even when the word matches.
  const std::vector<std::vector<std::uint32_t>> one{stream(9, 0, 64), stream(9, 10, 1)};
  CHECK(shardsim::repeated_streams(one).empty());
  std::vector<std::vector<std::uint32_t>> independent;
  for (std::uint64_t seed = 0; seed < 16; ++seed) independent.push_back(stream(seed, 0, 256));
  CHECK(shardsim::repeated_streams(independent).empty());
}

TEST_CASE("the detector flags same_seed at any p and names rank_offset as not the dense masks",
          "[dropout][repetition]") {
  for (double p : {0.5, 0.01}) {
    INFO("p = " << p);
    // same_seed, 13 tokens over 4 ranks (4,4,4,1): ranks 0-2 draw local words 0..127, rank 3
    // words 0..31, the others' first 32: one group of four, all six pairs flagged.
    std::vector<std::string> notes;
    const auto check = shardsim::repetition_check<double>(
        rank_words(DropoutPolicy::same_seed, 4, p), shardsim::dropout_threshold(p), "c", notes);
    for (int a = 0; a < 4; ++a) {
      for (int b = 0; b < 4; ++b) CHECK(check.local(a)[b] == (a < b ? 1.0 : 0.0));
    }
    // Pairs (0,1), (0,2), (0,3), each listed once (ranks 0 and 1 find each other), and the
    // summary.
    REQUIRE(notes.size() == 4);
    CHECK(notes[0].find("ranks 0,1: 128 of 128 words equal at offset 0") == 0);
    CHECK(notes[2].find("ranks 0,3: 32 of 32 words equal at offset 0") == 0);
    CHECK(notes[3].find("4 of 4 ranks repeat another rank's stream: seed repetition") !=
          std::string::npos);
  }
  std::vector<std::string> notes;
  const auto offset =
      shardsim::repetition_check<double>(rank_words(DropoutPolicy::rank_offset, 4, 0.01),
                                         shardsim::dropout_threshold(0.01), "c", notes);
  for (int r = 0; r < 4; ++r) {
    for (int b = 0; b < 4; ++b) CHECK(offset.local(r)[b] == 0.0);
  }
  REQUIRE(notes.size() == 1);
  CHECK(notes[0].find("not reproducible against the dense program") != std::string::npos);
  notes.clear();
  shardsim::repetition_check<double>(rank_words(DropoutPolicy::global, 4, 0.01),
                                     shardsim::dropout_threshold(0.01), "c", notes);
  REQUIRE(notes.size() == 1);
  CHECK(notes[0].find("every rank draws the dense program's words") != std::string::npos);
}

TEST_CASE("the verdict tensor is one row per rank: k^2 values in all", "[dropout][repetition]") {
  std::vector<std::string> notes;
  const auto check = shardsim::repetition_check<float>(
      rank_words(DropoutPolicy::global, 13, 0.5), shardsim::dropout_threshold(0.5), "c", notes);
  CHECK(check.layout.on(0) == Placement::shard("rank"));
  std::int64_t held = 0;
  for (const auto& local : check.locals) held += local.numel();
  CHECK(held == 13 * 13);
}

TEST_CASE("replicas drawing different words get a note on the mask boundary",
          "[dropout][repetition]") {
  const Shape shape({{"seq", 4}, {"hidden", 8}});
  std::vector<shardsim::DrawnWords> words;
  for (int r = 0; r < 3; ++r) {
    const auto frame = shardsim::dropout_frame(
        shardsim::make_dist<double>("x", shape, Placement::replicate(), 3), r);
    words.push_back(shardsim::dropout_words(shape, frame, params(0.1), DropoutPolicy::rank_offset));
  }
  const auto notes = shardsim::replica_word_notes(words, shardsim::dropout_threshold(0.1));
  REQUIRE(notes.size() == 2);  // ranks 1 and 2 against rank 0
  CHECK(notes[0].find("the replicas disagree with each other: rank 1") == 0);
  words.assign(3, words[0]);
  CHECK(shardsim::replica_word_notes(words, shardsim::dropout_threshold(0.1)).empty());
}

TEST_CASE("the binomial tail behind the repetition threshold", "[dropout]") {
  // P(Bin(32, 1/2) >= 32) = 2^-32. P(Bin(4, 1/2) >= 2) = (6 + 4 + 1) / 16 = 11/16.
  // Relative 1e-12: lgamma/exp/log in double over a handful of terms.
  CHECK(std::fabs(shardsim::binomial_upper_tail(32, 32, 0.5) / std::ldexp(1.0, -32) - 1) < 1e-12);
  CHECK(std::fabs(shardsim::binomial_upper_tail(4, 2, 0.5) - 11.0 / 16.0) < 1e-12);
  CHECK(shardsim::binomial_upper_tail(10, 0, 0.3) == 1.0);
  CHECK(shardsim::binomial_upper_tail(10, 11, 0.3) == 0.0);
  CHECK(shardsim::binomial_upper_tail(10, 10, 1.0) == 1.0);
}

TEST_CASE("the same_seed fault scenario fails at the repetition check naming ranks 0 and 1",
          "[dropout][scenario]") {
  const auto scenario = shardsim::load_scenario(std::string(SHARDSIM_SOURCE_DIR) +
                                                "/scenarios/faults/dropout_same_seed.toml");
  const shardsim::RunReport run = shardsim::evaluate(scenario, shardsim::parse_precision("f64"));
  REQUIRE(run.first_divergence);
  CHECK(run.first_divergence->tensor == "y.mask@repetition");
  CHECK(run.first_divergence->index ==
        std::vector<std::pair<std::string, std::int64_t>>{{"rank", 0}, {"peer", 1}});
  // rank_offset: the check passes (no repetition) and the mask is the first divergence.
  const auto offset = shardsim::load_scenario(std::string(SHARDSIM_SOURCE_DIR) +
                                              "/scenarios/faults/dropout_rank_offset.toml");
  const shardsim::RunReport offset_run =
      shardsim::evaluate(offset, shardsim::parse_precision("f64"));
  REQUIRE(offset_run.first_divergence);
  CHECK(offset_run.first_divergence->tensor == "y.mask");
  for (const auto& b : offset_run.boundaries) {
    if (b.entry.op != "dropout_repetition") continue;
    CHECK(b.status == shardsim::Status::exact);
    REQUIRE(b.entry.notes.size() == 1);
    CHECK(b.entry.notes[0].find("not reproducible against the dense program") != std::string::npos);
  }
}

TEST_CASE("same_seed on a padded split whose short rank has padding inside is flagged",
          "[dropout][scenario]") {
  // x[batch=3, seq=3, hidden=2] Shard(seq, padded) over 2 ranks: rank 1 holds seq 2 and one
  // padding row in every batch row, so its drawn words skip local indices 2, 3, 6, 7, 10, 11.
  // same_seed: its 6 words are rank 0's at the same local indices (flagged, pair (0, 1));
  // global: every word is the dense program's at its global index (the clean twin passes).
  std::string text =
      slurp(std::string(SHARDSIM_SOURCE_DIR) + "/scenarios/faults/dropout_same_seed.toml");
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"ranks = 4", "ranks = 2"},
           {"shape = [2, 13, 16]", "shape = [3, 3, 2]"},
           {"shape = [2, 13, 16]", "shape = [3, 3, 2]"},
           {"placement = \"Shard(seq)\"", "placement = \"Shard(seq, padded)\""},
           {"placement = \"Shard(seq)\"", "placement = \"Shard(seq, padded)\""}}) {
    replace_first(text, from, to);
  }
  const auto scenario = shardsim::parse_scenario(text, "same_seed_padded.toml");
  const shardsim::RunReport run = shardsim::evaluate(scenario, shardsim::parse_precision("f64"));
  REQUIRE(run.first_divergence);
  CHECK(run.first_divergence->tensor == "y.mask@repetition");
  CHECK(run.first_divergence->index ==
        std::vector<std::pair<std::string, std::int64_t>>{{"rank", 0}, {"peer", 1}});
  replace_first(text, "faults = [\"dropout_same_seed\"]\n", "");
  const auto clean = shardsim::parse_scenario(text, "global_padded.toml");
  CHECK(shardsim::evaluate(clean, shardsim::parse_precision("f64")).pass);
}

TEST_CASE("the memory estimate counts the word positions a padded split keeps",
          "[dropout][repetition]") {
  // x [1, 16, 4] over 8 ranks, 64 elements: Shard(seq) keeps two words per element (drawn and
  // dense); Shard(seq, padded) also one 8-byte position per word, counted as two more elements
  // (for any padded split, as an upper bound: here 16 over 8 leaves no rank a padding position).
  // At f64 (8 bytes an element) the difference is 2 x 64 x 8 = 1024 bytes.
  const std::string chunk = dropout_test::same_seed_scenario(8);
  std::string padded = chunk;
  replace_first(padded, "placement = \"Shard(seq)\"", "placement = \"Shard(seq, padded)\"");
  const auto f64 = shardsim::parse_precision("f64");
  const std::uint64_t plain =
      shardsim::estimate_memory_bytes(shardsim::parse_scenario(chunk, "chunk.toml"), f64);
  const std::uint64_t with_positions =
      shardsim::estimate_memory_bytes(shardsim::parse_scenario(padded, "padded.toml"), f64);
  CHECK(with_positions - plain == 2u * 64u * 8u);
}

TEST_CASE("same_seed on the SP MLP block at 8 ranks (13 tokens) is flagged",
          "[dropout][scenario]") {
  // 13 tokens over 8 ranks (2,2,2,2,2,2,1,0): ranks 0-5 hold 64 elements and draw the same
  // local words; keep/drop agreement of 64 positions at this p was not significant, 64 equal
  // 32-bit words are (chance 2^-2042).
  std::string text =
      slurp(std::string(SHARDSIM_SOURCE_DIR) + "/scenarios/mlp_sequence_parallel.toml");
  replace_first(text, "[mesh]\nranks = 4\n",
                "faults = [\"dropout_same_seed\"]\n[mesh]\nranks = 8\n");
  const auto scenario = shardsim::parse_scenario(text, "mlp8.toml");
  const shardsim::RunReport run = shardsim::evaluate(scenario, shardsim::parse_precision("f64"));
  REQUIRE(run.first_divergence);
  CHECK(run.first_divergence->op == "dropout_repetition");
  CHECK(run.first_divergence->index ==
        std::vector<std::pair<std::string, std::int64_t>>{{"rank", 0}, {"peer", 1}});
}

TEST_CASE("the repetition check at 1024 ranks fits 256 MiB and is in the memory estimate",
          "[dropout][repetition]") {
  // x [batch=1, seq=2048, hidden=4] Shard(seq) over 1024 ranks (8 elements each). The verdict is
  // [rank=1024, peer=1024]: one row per rank, k^2 = 2^20 values in all (8 MiB at f64), not a
  // k x k copy on every rank (k^3 = 2^30 values, 8 GiB). The estimate counts it: x and y
  // (2 x 8192 values, one copy per rank plus the oracle's), the verdict twice (sharded rows and
  // the oracle's zeros: 2 x 2^20) and the drawn words twice (2 x 8192): about 2.15e6 values,
  // 17 MB at f64, well under the 256 MiB limit. Over 4096 ranks the verdict alone is
  // 2 x 4096^2 x 8 bytes = 256 MiB: refused under a 64 MiB limit before anything runs.
  const auto scenario =
      shardsim::parse_scenario(dropout_test::same_seed_scenario(1024), "same_seed_1024.toml");
  const auto f64 = shardsim::parse_precision("f64");
  const std::uint64_t estimate = shardsim::estimate_memory_bytes(scenario, f64);
  CHECK(estimate >= 8u * 2 * (1u << 20));  // the verdict's two copies are counted
  CHECK(estimate < 256u << 20);
  shardsim::RunOptions options;
  options.max_memory_bytes = 256u << 20;
  REQUIRE_NOTHROW(shardsim::check_memory(scenario, f64, options));
  const shardsim::RunReport report = shardsim::evaluate(scenario, f64, options);
  CHECK_FALSE(report.pass);  // same_seed: flagged
  const auto wide =
      shardsim::parse_scenario(dropout_test::same_seed_scenario(4096), "same_seed_4096.toml");
  options.max_memory_bytes = 64u << 20;  // 2 x 4096^2 x 8 bytes = 256 MiB of verdict alone
  CHECK_THROWS_AS(shardsim::check_memory(wide, f64, options), shardsim::InputError);
}
