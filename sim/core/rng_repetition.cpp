// The dropout repetition detector over drawn words (rng.hpp).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <unordered_map>

#include "shardsim/error.hpp"
#include "shardsim/rng.hpp"

namespace shardsim {

namespace {

// log2 of n_a * C(compared, equal) * 2^(-32 equal): the chance that independent streams match
// this well at some offset of a stream of n_a words.
double log2_chance(std::int64_t stream_words, std::int64_t compared, std::int64_t equal) {
  const double log2_choose = (std::lgamma(static_cast<double>(compared) + 1) -
                              std::lgamma(static_cast<double>(equal) + 1) -
                              std::lgamma(static_cast<double>(compared - equal) + 1)) /
                             std::log(2.0);
  return std::log2(static_cast<double>(std::max<std::int64_t>(stream_words, 1))) + log2_choose -
         32.0 * static_cast<double>(equal);
}

// Whether b's head sits in a's stream at `offset` (every head word that fits there matches, and
// at least two do, so a single chance equality of one word never counts).
bool head_matches(const std::vector<std::uint32_t>& a, std::size_t offset,
                  const std::vector<std::uint32_t>& b, std::size_t head) {
  std::size_t matched = 0;
  for (std::size_t i = 0; i < head && offset + i < a.size(); ++i) {
    if (a[offset + i] != b[i]) return false;
    ++matched;
  }
  return matched >= 2;
}

StreamRepeat compare_overlap(const std::vector<std::vector<std::uint32_t>>& words, int a, int b,
                             std::size_t offset) {
  const auto& sa = words[static_cast<std::size_t>(a)];
  const auto& sb = words[static_cast<std::size_t>(b)];
  StreamRepeat repeat{.rank_a = a, .rank_b = b, .offset = static_cast<std::int64_t>(offset)};
  const std::size_t overlap = std::min(sb.size(), sa.size() - offset);
  repeat.compared = static_cast<std::int64_t>(overlap);
  for (std::size_t i = 0; i < overlap; ++i) {
    if (sa[offset + i] == sb[i]) ++repeat.equal;
  }
  repeat.log2_chance =
      log2_chance(static_cast<std::int64_t>(sa.size()), repeat.compared, repeat.equal);
  return repeat;
}

}  // namespace

std::string StreamRepeat::str() const {
  char text[200];
  // The same stream is a symmetric relation: name the pair in rank order.
  const bool same = offset == 0;
  std::snprintf(text, sizeof text,
                "ranks %d,%d: %lld of %lld words equal at offset %lld (chance 2^%.0f)%s",
                same ? std::min(rank_a, rank_b) : rank_a, same ? std::max(rank_a, rank_b) : rank_b,
                static_cast<long long>(equal), static_cast<long long>(compared),
                static_cast<long long>(offset), log2_chance,
                log2_chance < std::log2(kRepetitionTail) ? ": REPEATED" : "");
  return text;
}

std::vector<StreamRepeat> repeated_streams(const std::vector<std::vector<std::uint32_t>>& words) {
  SHARDSIM_ASSERT(!words.empty(), "repeated_streams needs at least one rank");
  const int ranks = static_cast<int>(words.size());
  // First head word -> the ranks whose head starts with it.
  std::unordered_map<std::uint32_t, std::vector<int>> heads;
  for (int b = 0; b < ranks; ++b) {
    if (words[static_cast<std::size_t>(b)].size() >= 2) {
      heads[words[static_cast<std::size_t>(b)][0]].push_back(b);
    }
  }
  // For each b, the first (lowest a, then lowest offset) stream holding its head.
  std::vector<bool> found(static_cast<std::size_t>(ranks), false);
  std::vector<StreamRepeat> first(static_cast<std::size_t>(ranks));
  for (int a = 0; a < ranks; ++a) {
    const auto& sa = words[static_cast<std::size_t>(a)];
    for (std::size_t offset = 0; offset < sa.size(); ++offset) {
      const auto hit = heads.find(sa[offset]);
      if (hit == heads.end()) continue;
      for (int b : hit->second) {
        if (b == a || found[static_cast<std::size_t>(b)]) continue;
        const auto& sb = words[static_cast<std::size_t>(b)];
        if (!head_matches(sa, offset, sb, std::min(sb.size(), kRepetitionHeadWords))) continue;
        const StreamRepeat repeat = compare_overlap(words, a, b, offset);
        if (repeat.log2_chance >= std::log2(kRepetitionTail)) continue;
        found[static_cast<std::size_t>(b)] = true;
        first[static_cast<std::size_t>(b)] = repeat;
      }
    }
  }
  std::vector<StreamRepeat> out;
  for (int b = 0; b < ranks; ++b) {
    if (found[static_cast<std::size_t>(b)]) out.push_back(first[static_cast<std::size_t>(b)]);
  }
  return out;
}

}  // namespace shardsim
