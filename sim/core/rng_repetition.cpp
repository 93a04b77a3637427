// The dropout repetition detector over drawn words (rng.hpp).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <unordered_map>

#include "core/error.hpp"
#include "core/rng.hpp"

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

// One rank's stream: its words and, when padding was skipped, each word's local flat index.
class Stream {
 public:
  Stream(const std::vector<std::uint32_t>& words, const std::vector<std::int64_t>* at)
      : words_(words), at_(at != nullptr && !at->empty() ? at : nullptr) {}
  std::size_t size() const { return words_.size(); }
  std::uint32_t word(std::size_t i) const { return words_[i]; }
  // The local flat index of word i.
  std::int64_t local(std::size_t i) const { return at_ ? (*at_)[i] : static_cast<std::int64_t>(i); }
  // The word at local flat index j, or none (a padding position, or outside the stream).
  std::optional<std::uint32_t> at_local(std::int64_t j) const {
    if (at_ == nullptr) {
      if (j < 0 || j >= static_cast<std::int64_t>(words_.size())) return std::nullopt;
      return words_[static_cast<std::size_t>(j)];
    }
    const auto hit = std::lower_bound(at_->begin(), at_->end(), j);
    if (hit == at_->end() || *hit != j) return std::nullopt;
    return words_[static_cast<std::size_t>(hit - at_->begin())];
  }
  // One past the last local index that holds a word.
  std::int64_t end() const { return words_.empty() ? 0 : local(words_.size() - 1) + 1; }

 private:
  const std::vector<std::uint32_t>& words_;
  const std::vector<std::int64_t>* at_;
};

// Whether b's head sits in a's stream at local offset `offset` (b's word at local index j equals
// a's at j + offset for every head word that lands on a word of a, and at least two do, so a
// single chance equality of one word never counts). Head words that land on a's padding are
// skipped; the head stops where a's stream ends.
bool head_matches(const Stream& a, std::int64_t offset, const Stream& b, std::size_t head) {
  std::size_t matched = 0;
  for (std::size_t i = 0; i < head; ++i) {
    const std::int64_t j = b.local(i) + offset;
    if (j >= a.end()) break;
    const std::optional<std::uint32_t> word = a.at_local(j);
    if (!word) continue;
    if (*word != b.word(i)) return false;
    ++matched;
  }
  return matched >= 2;
}

// b against a over every word of b that lands on a word of a at `offset`.
StreamRepeat compare_overlap(const Stream& sa, const Stream& sb, int a, int b,
                             std::int64_t offset) {
  StreamRepeat repeat{.rank_a = a, .rank_b = b, .offset = offset};
  for (std::size_t i = 0; i < sb.size(); ++i) {
    const std::optional<std::uint32_t> word = sa.at_local(sb.local(i) + offset);
    if (!word) continue;
    ++repeat.compared;
    if (*word == sb.word(i)) ++repeat.equal;
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

std::vector<StreamRepeat> repeated_streams(const std::vector<std::vector<std::uint32_t>>& words,
                                           const std::vector<std::vector<std::int64_t>>& at) {
  SHARDSIM_ASSERT(!words.empty(), "repeated_streams needs at least one rank");
  SHARDSIM_ASSERT(at.empty() || at.size() == words.size(),
                  "repeated_streams: one position list per rank");
  const int ranks = static_cast<int>(words.size());
  std::vector<Stream> streams;
  for (std::size_t r = 0; r < words.size(); ++r) {
    const std::vector<std::int64_t>* positions = at.empty() ? nullptr : &at[r];
    SHARDSIM_ASSERT(
        positions == nullptr || positions->empty() || positions->size() == words[r].size(),
        "repeated_streams: one position per word");
    streams.emplace_back(words[r], positions);
  }
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
    const Stream& sa = streams[static_cast<std::size_t>(a)];
    for (std::size_t s = 0; s < sa.size(); ++s) {
      const auto hit = heads.find(sa.word(s));
      if (hit == heads.end()) continue;
      for (int b : hit->second) {
        if (b == a || found[static_cast<std::size_t>(b)]) continue;
        const Stream& sb = streams[static_cast<std::size_t>(b)];
        const std::int64_t offset = sa.local(s) - sb.local(0);
        if (!head_matches(sa, offset, sb, std::min(sb.size(), kRepetitionHeadWords))) continue;
        const StreamRepeat repeat = compare_overlap(sa, sb, a, b, offset);
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
