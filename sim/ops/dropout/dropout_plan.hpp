// Sharded plan for dropout. Each rank draws its own mask from its local shape and its frame under
// the plan's policy (rng.hpp); no collective is needed. Under the global policy every rank's mask
// is the slice of the dense mask, so the mask and y match the oracle bit for bit.
//
// Boundaries, in order:
//   OUTPUT.mask@repetition  (check, Shard inputs only) the repetition detector's verdict over the
//                           ranks' drawn words (rng.hpp) as a [rank=k, peer=k] Shard(rank)
//                           tensor (k^2 values in all): 1 at (a, b), a < b, when ranks a and b
//                           draw the same stream, or one draws the other's shifted, else 0. The
//                           oracle's is all zeros, so a repeated pair is the first divergence and
//                           its index names the ranks. Notes: one line per repeating rank (at
//                           most 16) and a summary; without repetition the summary says whether
//                           the ranks' words are the dense program's (a per-rank seed offset
//                           draws independent words that are not).
//   OUTPUT.mask             the keep mask as values 1 / 0, exact. For a Replicate input whose
//                           replicas draw different words, notes say so.
//   OUTPUT                  y, exact
// A Replicate input is not checked for repetition: there every rank holds the same elements and
// must draw the same mask, which the mask boundary checks on every rank. Likewise, on an N-D mesh
// the ranks that hold the same elements of a Shard input (Replicate on another dim: the tp ranks
// of one dp shard) are one holder: only the lowest of them is compared with the other holders.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/world.hpp"
#include "ops/dropout/dropout.hpp"
#include "ops/op_list.hpp"

namespace shardsim {

struct DropoutShardedSaved {
  std::vector<DropoutMask> masks;  // one per rank, the local mask
};

// Rank `rank`'s frame: where its local tensor of `x` sits in the global one.
template <typename T>
DropoutFrame dropout_frame(const DistTensor<T>& x, int rank) {
  DropoutFrame frame;
  frame.global = x.global;
  frame.rank = rank;
  if (x.layout.is_replicate()) return frame;
  frame.box = local_box(x, rank);
  return frame;
}

namespace detail {

// Disjoint sets of ranks drawing the same stream (offset-0 repetitions).
inline int stream_group(std::vector<int>& parent, int rank) {
  while (parent[static_cast<std::size_t>(rank)] != rank) {
    rank = parent[static_cast<std::size_t>(rank)] =
        parent[static_cast<std::size_t>(parent[static_cast<std::size_t>(rank)])];
  }
  return rank;
}

// The summary note when no stream repeats: are the ranks' words the dense program's? `holders`:
// how many distinct holders were compared.
inline std::string unrepeated_note(const std::vector<DrawnWords>& words, std::size_t holders) {
  std::int64_t total = 0, equal = 0;
  int foreign_ranks = 0;
  for (const DrawnWords& w : words) {
    std::int64_t mine = 0;
    for (std::size_t i = 0; i < w.drawn.size(); ++i) mine += w.drawn[i] == w.dense[i] ? 1 : 0;
    total += static_cast<std::int64_t>(w.drawn.size());
    equal += mine;
    if (mine != static_cast<std::int64_t>(w.drawn.size())) ++foreign_ranks;
  }
  const std::string head =
      "words: no two of the " + std::to_string(holders) +
      (holders == words.size() ? " ranks" : " ranks holding distinct elements") +
      " share a stream (each rank's first " + std::to_string(kRepetitionHeadWords) +
      " words looked up in every other rank's words)";
  if (foreign_ranks == 0) {
    return head + "; every rank draws the dense program's words at its slice";
  }
  return head + ", but " + std::to_string(foreign_ranks) +
         " ranks draw words that are not the dense program's at their slices (" +
         std::to_string(equal) + " of " + std::to_string(total) +
         " words equal): independent per-rank masks, not reproducible against the dense program";
}

}  // namespace detail

// The detector's verdict tensor and notes for the ranks' drawn words (see the header comment).
// The verdict is [rank=k, peer=k] Shard(rank): rank a holds row a, so the check costs k^2
// values in all. Flagged: (a, b), a < b, for every pair in a group of ranks drawing the same
// stream, and for every shifted repetition. `replica_of[r]`: the lowest rank holding the same
// elements as rank r (empty: every rank its own); only those lowest ranks are compared.
template <typename T>
DistTensor<T> repetition_check(const std::vector<DrawnWords>& words, std::uint32_t threshold,
                               const std::string& name, std::vector<std::string>& notes,
                               const std::vector<int>& replica_of = {}) {
  const int ranks = static_cast<int>(words.size());
  const Shape shape({{"rank", ranks}, {"peer", ranks}});
  // Over every rank of the mesh, flattened: a 1-D mesh of `ranks` (global rank order).
  DistTensor<T> out = make_dist<T>(name, shape, Layout({Placement::shard("rank")}),
                                   std::make_shared<const Mesh>(ranks));
  if (threshold == 0) {
    notes.push_back("words: p = 0, every element is kept; nothing to repeat");
    return out;
  }
  std::vector<int> holders;  // the ranks compared, ascending
  std::vector<std::vector<std::uint32_t>> streams;
  std::vector<std::vector<std::int64_t>> positions;
  for (int r = 0; r < ranks; ++r) {
    if (!replica_of.empty() && replica_of[static_cast<std::size_t>(r)] != r) continue;
    holders.push_back(r);
    streams.push_back(words[static_cast<std::size_t>(r)].drawn);
    positions.push_back(words[static_cast<std::size_t>(r)].at);
  }
  std::vector<StreamRepeat> repeats = repeated_streams(streams, positions);
  for (StreamRepeat& repeat : repeats) {  // positions among the holders -> ranks
    repeat.rank_a = holders[static_cast<std::size_t>(repeat.rank_a)];
    repeat.rank_b = holders[static_cast<std::size_t>(repeat.rank_b)];
  }
  if (repeats.empty()) {
    notes.push_back(detail::unrepeated_note(words, holders.size()));
    return out;
  }
  std::vector<int> parent(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) parent[static_cast<std::size_t>(r)] = r;
  auto flag = [&](int a, int b) { out.local(std::min(a, b))[std::max(a, b)] = T(1); };
  constexpr std::size_t kMaxNotes = 16;
  std::size_t listed = 0;
  for (const StreamRepeat& repeat : repeats) {
    // An offset-0 pair found from both ends is listed once.
    const bool listed_already =
        repeat.offset == 0 && repeat.rank_a < repeat.rank_b &&
        detail::stream_group(parent, repeat.rank_a) == detail::stream_group(parent, repeat.rank_b);
    if (!listed_already && ++listed <= kMaxNotes) notes.push_back(repeat.str());
    if (repeat.offset == 0) {
      parent[static_cast<std::size_t>(detail::stream_group(parent, repeat.rank_b))] =
          detail::stream_group(parent, repeat.rank_a);
    } else {
      flag(repeat.rank_a, repeat.rank_b);
    }
  }
  if (listed > kMaxNotes)
    notes.push_back("... and " + std::to_string(listed - kMaxNotes) + " more");
  for (int a = 0; a < ranks; ++a) {
    for (int b = a + 1; b < ranks; ++b) {
      if (detail::stream_group(parent, a) == detail::stream_group(parent, b)) flag(a, b);
    }
  }
  notes.push_back("words: " + std::to_string(repeats.size()) + " of " +
                  std::to_string(holders.size()) +
                  (holders.size() == words.size() ? " ranks" : " ranks holding distinct elements") +
                  " repeat another rank's stream: seed repetition");
  return out;
}

// For a Replicate input: a note when the replicas draw different words (they must draw the
// same mask), else nothing.
inline std::vector<std::string> replica_word_notes(const std::vector<DrawnWords>& words,
                                                   std::uint32_t threshold) {
  if (threshold == 0) return {};
  std::vector<std::string> notes;
  for (std::size_t r = 1; r < words.size(); ++r) {
    std::int64_t differ = 0;
    for (std::size_t i = 0; i < words[r].drawn.size(); ++i) {
      differ += words[r].drawn[i] != words[0].drawn[i] ? 1 : 0;
    }
    if (differ == 0) continue;
    notes.push_back("the replicas disagree with each other: rank " + std::to_string(r) +
                    "'s words differ from rank 0's at " + std::to_string(differ) + " of " +
                    std::to_string(words[r].drawn.size()) +
                    " positions (independent per-rank masks, not reproducible against the "
                    "dense program)");
    if (notes.size() == 16) break;
  }
  return notes;
}

// REQUIRES: x is not Partial. y has x's placement.
template <typename T>
DistTensor<T> dropout_sharded(const World<T>& world, const DistTensor<T>& x,
                              const DropoutParams& params, DropoutPolicy policy,
                              const std::string& output, DropoutShardedSaved& saved) {
  SHARDSIM_ASSERT(!x.layout.has_partial(), "dropout needs a Shard or Replicate input");
  const int ranks = world.size();
  saved.masks.assign(static_cast<std::size_t>(ranks), {});
  DistTensor<T> mask = world.make(output + ".mask", x.global, x.layout);
  DistTensor<T> y = world.make(output, x.global, x.layout);
  world.for_each_rank([&](int r) {
    DropoutMask& local = saved.masks[static_cast<std::size_t>(r)];
    local = dropout_mask(x.local(r).shape(), dropout_frame(x, r), params, policy);
    mask.local(r) = mask_values<T>(x.local(r).shape(), local);
    dropout_forward(x.local(r), local, params.p, y.local(r));
  });
  zero_padding(mask);
  zero_padding(y);
  // The checker reads every rank's drawn words here; the rank programs above did not. It
  // redraws them from the metadata (a local shape and frame), so every process has all of them.
  std::vector<DrawnWords> words;
  for (int r = 0; r < ranks; ++r) {
    words.push_back(dropout_words(local_shape(x.global, x.layout, *x.mesh, r), dropout_frame(x, r),
                                  params, policy));
  }
  const std::uint32_t threshold = dropout_threshold(params.p);
  if (!x.layout.is_replicate()) {
    // Ranks holding the same elements (Replicate on another mesh dim) must draw the same words:
    // one holder each.
    std::vector<int> replica_of(static_cast<std::size_t>(ranks));
    std::map<std::vector<std::int64_t>, int> first_holder;  // a box's fields -> its lowest rank
    for (int r = 0; r < ranks; ++r) {
      std::vector<std::int64_t> key;
      for (const Slice& s : local_box(x, r)) {
        key.insert(key.end(), {s.begin, s.end, s.local_extent, s.second_begin, s.second_end});
      }
      replica_of[static_cast<std::size_t>(r)] =
          first_holder.emplace(std::move(key), r).first->second;
    }
    std::vector<std::string> notes;
    DistTensor<T> check =
        repetition_check<T>(words, threshold, output + ".mask@repetition", notes, replica_of);
    world.compare_boundary({.op = "dropout_repetition",
                            .tensor = check.name,
                            .exact = true,
                            .kind = BoundaryKind::check,
                            .notes = notes},
                           check);
  }
  world.compare_boundary({.op = op_label(OpKind::dropout),
                          .tensor = mask.name,
                          .exact = true,
                          .notes = x.layout.is_replicate() ? replica_word_notes(words, threshold)
                                                           : std::vector<std::string>{}},
                         mask);
  world.compare_boundary({.op = op_label(OpKind::dropout),
                          .tensor = output,
                          .exact = true,
                          .inputs = {x.name, mask.name}},
                         y);
  return y;
}

// dx = dy * scale where this rank's mask keeps, else 0. REQUIRES: dy is held at
// elementwise_grad_target(x, dy) (add_plan.hpp). dx has dy's placement; the caller records it.
template <typename T>
DistTensor<T> dropout_backward_sharded(const World<T>& world, const DistTensor<T>& dy,
                                       const DropoutShardedSaved& saved, double p,
                                       const std::string& name) {
  DistTensor<T> dx = world.make(name, dy.global, dy.layout);
  world.for_each_rank([&](int r) {
    dropout_backward(dy.local(r), saved.masks[static_cast<std::size_t>(r)], p, dx.local(r));
  });
  zero_padding(dx);
  return dx;
}

}  // namespace shardsim
