// mask_pattern: what per-rank 0/1 masks say about the random streams behind them.
#include <cmath>
#include <map>

#include "diagnosis/signatures.hpp"
#include "core/rng.hpp"
#include "diagnosis/format.hpp"

namespace shardsim {

namespace {

using diag::num;

bool binary(double v) { return v == 0 || v == 1; }

struct RankMask {
  std::vector<std::int64_t> global;  // the rank's held elements, ascending global index
  std::vector<double> value;
};

// A rank's mask equal to the dense mask at flat positions shifted by one s != 0, over an
// overlap long enough that chance agreement (chance^overlap, times the shifts tried) is below
// 1e-9. Returns the shift, or 0.
std::int64_t shifted_match(const RankMask& mask, const std::vector<double>& dense, double chance) {
  const auto n = static_cast<std::int64_t>(dense.size());
  if (n > (1 << 16) || mask.global.empty()) return 0;  // quadratic search: small tensors only
  for (std::int64_t s = -n + 1; s < n; ++s) {
    if (s == 0) continue;
    std::int64_t overlap = 0;
    bool equal = true;
    for (std::size_t i = 0; i < mask.global.size() && equal; ++i) {
      const std::int64_t at = mask.global[i] + s;
      if (at < 0 || at >= n) continue;
      ++overlap;
      equal = dense[static_cast<std::size_t>(at)] == mask.value[i];
    }
    if (equal &&
        static_cast<double>(overlap) * std::log(chance) + std::log(2.0 * n) < std::log(1e-9)) {
      return s;
    }
  }
  return 0;
}

Finding from_check(const Observed& check) {
  Finding f{.signature = "mask_pattern", .cause = Cause::seed_repetition};
  std::int64_t flagged = 0;
  for (const Held& h : held_elements(check)) flagged += h.sharded != 0 ? 1 : 0;
  if (flagged == 0) return f;
  std::string pair;
  for (const std::string& note : check.entry.notes) {
    if (note.find("REPEATED") != std::string::npos) {
      pair = note;
      break;
    }
  }
  f.confidence = 0.97;
  f.evidence = "the repetition check flags " + std::to_string(flagged) + " pairs of ranks" +
               (pair.empty() ? std::string() : "; " + pair);
  return f;
}

// Each rank's mask against the dense slice: how many ranks differ, how many of those agree no
// more than chance, how many are the dense mask shifted, with one example line of each.
struct Survey {
  int differing = 0, at_chance = 0, shifted = 0;
  std::string example, shift_example;
};

Survey survey_ranks(const Observed& mask, const std::vector<Held>& held, double chance) {
  Survey out;
  std::map<int, RankMask> by_rank;
  for (const Held& h : held) {
    by_rank[h.rank].global.push_back(h.global);
    by_rank[h.rank].value.push_back(h.sharded);
  }
  for (const auto& [rank, m] : by_rank) {
    std::int64_t agree = 0;
    for (std::size_t i = 0; i < m.global.size(); ++i) {
      agree += mask.dense[static_cast<std::size_t>(m.global[i])] == m.value[i] ? 1 : 0;
    }
    const auto n = static_cast<std::int64_t>(m.global.size());
    if (agree == n) continue;
    ++out.differing;
    if (const std::int64_t s = shifted_match(m, mask.dense, chance)) {
      ++out.shifted;
      if (out.shift_example.empty()) {
        out.shift_example = "rank " + std::to_string(rank) +
                            "'s mask equals the dense mask at flat positions shifted by " +
                            std::to_string(s);
      }
      continue;
    }
    if (binomial_upper_tail(n, agree, chance) > 1e-3) ++out.at_chance;
    if (out.example.empty()) {
      out.example = "rank " + std::to_string(rank) + "'s mask agrees with the dense one at " +
                    std::to_string(agree) + " of " + std::to_string(n) + " positions (" +
                    num(static_cast<double>(agree) / static_cast<double>(n)) + ") vs " +
                    num(chance) + " by chance";
    }
  }
  return out;
}

}  // namespace

Finding mask_pattern(const Observed& mask, const Observed* check) {
  if (check) {
    Finding flagged = from_check(*check);
    if (flagged.present()) return flagged;
  }
  Finding f{.signature = "mask_pattern", .cause = Cause::rank_seed_offset};
  const std::vector<Held> held = held_elements(mask);
  bool masks = !mask.dense.empty() && !held.empty();
  for (double d : mask.dense) masks = masks && binary(d);
  for (const Held& h : held) masks = masks && binary(h.sharded);
  if (!masks) {
    f.evidence = "n/a: not a 0/1 mask";
    return f;
  }
  double drops = 0;
  for (double d : mask.dense) drops += d == 0 ? 1 : 0;
  const double q = drops / static_cast<double>(mask.dense.size());
  const double chance = q * q + (1 - q) * (1 - q);
  const Survey survey = survey_ranks(mask, held, chance);
  const int differing = survey.differing, at_chance = survey.at_chance;
  const std::string& example = survey.example;
  if (differing == 0) {
    f.evidence = "every rank's mask is the dense mask's slice";
    return f;
  }
  if (survey.shifted == differing) {
    f.cause = Cause::position_offset;
    f.confidence = 0.8;
    f.evidence = survey.shift_example + ": drawn at shifted element indices";
    return f;
  }
  std::string detector;
  for (const Observed* o : {&mask, check}) {
    if (!o) continue;
    for (const std::string& note : o->entry.notes) {
      if (note.find("not reproducible") != std::string::npos) detector = note;
    }
  }
  const bool replicas = mask.entry.layout.is_replicate();
  if (at_chance == differing || !detector.empty()) {
    // At small p independent masks agree almost everywhere: without the detector's word-level
    // verdict the masks alone are weak evidence.
    const double expected_disagreements = static_cast<double>(held.size()) * (1 - chance);
    f.confidence = !detector.empty() ? 0.9 : expected_disagreements >= 10 ? 0.85 : 0.5;
    f.evidence = example + "; " + std::to_string(at_chance) + " of " + std::to_string(differing) +
                 " differing ranks at chance" +
                 (replicas ? ", the replicas disagree with each other" : "") +
                 ": independent per-rank masks, not reproducible against the dense program";
    return f;
  }
  f.confidence = 0.3;
  f.evidence = example + ": the masks differ from the dense mask, partly above chance";
  return f;
}

}  // namespace shardsim
