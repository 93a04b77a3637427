// ring_merge: which rows of a ring boundary carry the gap, against how many KV blocks each row's
// window spans (signatures.hpp).
#include <algorithm>
#include <cmath>
#include <set>

#include "diagnosis/signatures.hpp"
#include "diagnosis/format.hpp"

namespace shardsim {

Finding ring_merge(const RingCase& c, double unit) {
  Finding f{.signature = "ring_merge", .cause = Cause::softmax_merge};
  if (!c.o || c.o->dense.empty() || c.kv <= 0 || c.group < 2 || !c.o->entry.global.has("seq") ||
      !c.o->entry.global.has("head") || c.o->entry.global.axes().front().name != "batch") {
    f.evidence = "n/a: not a ring attention boundary with its KV geometry";
    return f;
  }
  const Shape& g = c.o->entry.global;
  const std::int64_t seq = g.extent("seq");
  const std::int64_t cached = c.kv - seq;
  // Elements per query position: the axes after seq (head, and head_dim when present).
  const std::int64_t per_position = g.numel() / (g.extent("batch") * seq);
  const std::vector<Slice> blocks = shard_slices(c.kv, c.group, c.split);
  auto blocks_of = [&](std::int64_t i) {  // blocks holding a key query i may attend to
    std::set<int> spanned;
    for (std::int64_t j = 0; j < c.kv; ++j) {
      const std::int64_t d = cached + i - j;
      if (d < 0 || (c.window && d >= *c.window)) continue;
      spanned.insert(owner_of(blocks, j));
    }
    return spanned.size();
  };
  std::vector<std::size_t> spans(static_cast<std::size_t>(seq));
  for (std::int64_t i = 0; i < seq; ++i) spans[static_cast<std::size_t>(i)] = blocks_of(i);
  double scale = 0;
  for (double v : c.o->dense) {
    if (std::isfinite(v)) scale = std::max(scale, std::fabs(v));
  }
  const double tolerance = kFitUlps * unit * std::max(scale, 1e-300);
  std::int64_t single = 0, single_off = 0, merged = 0, merged_off = 0, overflowed = 0;
  for (const Held& h : held_elements(*c.o)) {
    const std::int64_t i = (h.global / per_position) % seq;
    const double dense = c.o->dense[static_cast<std::size_t>(h.global)];
    const bool off = !(std::fabs(h.sharded - dense) <= tolerance);  // NaN and inf are off
    if (spans[static_cast<std::size_t>(i)] <= 1) {
      ++single;
      single_off += off;
    } else {
      ++merged;
      merged_off += off;
      overflowed += std::isfinite(dense) && h.sharded == HUGE_VAL;
    }
  }
  const std::string counts = "rows spanning one KV block: " + std::to_string(single_off) + " of " +
                             std::to_string(single) +
                             " elements off; spanning two or more: " + std::to_string(merged_off) +
                             " of " + std::to_string(merged);
  // A merge of exponentials without the running max overflows: +inf where the oracle is finite,
  // in rows that merged blocks, however few rows have logits that large. Nothing else gives
  // +inf from finite logits (an lse is at most the largest logit plus log of the key count, an
  // output a convex combination of values; a row with no key left gives -inf or NaN).
  if (overflowed > 0 && single > 0 && single_off == 0) {
    f.confidence = 0.95;
    f.evidence = counts + "; " + std::to_string(overflowed) +
                 " merged values are +inf where the oracle is finite: the merge overflowed "
                 "(exponentials taken without the running max)";
    return f;
  }
  // A wrong merge moves (nearly) every merged row; a mask bound moved by one only the rows
  // where it admits or drops a key, and a position bug moves single-block rows too.
  if (single == 0 || single_off > 0 || 2 * merged_off <= merged) {
    f.evidence = counts + (single == 0 ? " (no single-block row to compare)" : "") +
                 (single_off == 0 && single > 0 && merged_off > 0 ? ": too few merged rows" : "");
    return f;
  }
  f.confidence = 0.9;
  f.evidence = counts + ": only rows that merged blocks are wrong";
  return f;
}

}  // namespace shardsim
