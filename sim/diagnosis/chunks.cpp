// Streaming and provenance signatures: chunk_onset and provenance.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <unordered_map>

#include "diagnosis/signatures.hpp"
#include "diagnosis/format.hpp"

namespace shardsim {

namespace {

bool passes(Status status) { return status != Status::fail; }

std::string label(const TraceStatus& t) {
  return "#" + std::to_string(t.id) + " " + t.tensor + " (" + t.op + ")";
}

std::uint64_t bits_of(double v) {
  std::uint64_t out = 0;
  std::memcpy(&out, &v, sizeof out);
  return out;
}

// Values too common to tell stages apart.
bool ordinary(double v) { return v == 0 || v == 1 || v == -1 || !std::isfinite(v); }

}  // namespace

Finding chunk_onset(const std::vector<TraceStatus>& trace, int failing_id) {
  Finding f{.signature = "chunk_onset", .cause = Cause::cache_convention};
  const auto failing = std::find_if(trace.begin(), trace.end(),
                                    [&](const TraceStatus& t) { return t.id == failing_id; });
  if (failing == trace.end() || failing->chunk == 1) {
    f.evidence = "the divergence is in chunk 1 (or the run is not streamed)";
    return f;
  }
  std::set<std::pair<std::string, std::string>> first_chunk;
  int first_count = 0;
  for (const TraceStatus& t : trace) {
    if (t.step != failing->step || t.chunk != 1) continue;
    if (!passes(t.status)) {
      f.evidence = "chunk 1 diverges too (" + label(t) + ")";
      return f;
    }
    first_chunk.insert({t.op, t.tensor});
    ++first_count;
  }
  const std::string head = "every boundary of chunk 1 passes (" + std::to_string(first_count) +
                           "); chunk " + std::to_string(failing->chunk) + " diverges first at " +
                           label(*failing);
  if (!first_chunk.count({failing->op, failing->tensor})) {
    f.confidence = 0.8;
    f.evidence = head +
                 ", a boundary chunk 1 does not have: state carried in from the previous "
                 "chunk";
    return f;
  }
  // At a boundary chunk 1 has: no evidence for the cache. A later chunk also exercises what
  // chunk 1 could not (a key pair as far apart as the window, a position past the first chunk),
  // so a mask bound or a position bug first shows there too; naming the cache would be a guess,
  // and a wrong cause is worse than none.
  std::string carried;
  for (const TraceStatus& t : trace) {
    if (t.step != failing->step || t.chunk != failing->chunk || t.id >= failing->id) continue;
    if (!first_chunk.count({t.op, t.tensor})) carried += (carried.empty() ? "" : ", ") + t.tensor;
  }
  f.evidence = head +
               (carried.empty() ? ", with no carried state recorded"
                                : ", after the carried state (" + carried + ") matched") +
               ": a boundary chunk 1 has, so no sign of the cache";
  return f;
}

Finding provenance(const Observed& o, const std::vector<const Observed*>& earlier,
                   bool carried_state) {
  Finding f{.signature = "provenance",
            .cause = carried_state ? Cause::cache_convention : Cause::wrong_stage};
  std::set<std::uint64_t> own;
  for (double d : o.dense) own.insert(bits_of(d));
  // value bits -> the earlier boundaries whose dense values hold it (each listed once)
  std::unordered_map<std::uint64_t, std::vector<std::size_t>> where;
  for (std::size_t b = 0; b < earlier.size(); ++b) {
    for (double d : earlier[b]->dense) {
      if (ordinary(d) || own.count(bits_of(d))) continue;
      std::vector<std::size_t>& list = where[bits_of(d)];
      if (list.empty() || list.back() != b) list.push_back(b);
    }
  }
  std::vector<std::size_t> hits(earlier.size(), 0);
  std::size_t looked = 0;
  for (const Held& h : held_elements(o)) {
    if (o.dense.empty() || h.sharded == o.dense[static_cast<std::size_t>(h.global)] ||
        ordinary(h.sharded)) {
      continue;
    }
    ++looked;
    const auto found = where.find(bits_of(h.sharded));
    if (found == where.end()) continue;
    for (std::size_t b : found->second) ++hits[b];
  }
  const auto best = std::max_element(hits.begin(), hits.end());  // the earliest among equals
  if (looked < 4 || best == hits.end() || 10 * *best < 9 * looked) {
    f.evidence = "the differing sharded values are not another boundary's dense values";
    return f;
  }
  const Observed& source = *earlier[static_cast<std::size_t>(best - hits.begin())];
  f.confidence = carried_state ? 0.95 : 0.7;
  f.evidence = std::to_string(*best) + " of " + std::to_string(looked) +
               " differing sharded values of " + o.entry.tensor +
               " are, bit for bit, dense values of " + source.entry.tensor + " (#" +
               std::to_string(source.entry.id) + ", step " + std::to_string(source.entry.step) +
               " chunk " + std::to_string(source.entry.chunk) + "): the tensor holds that stage";
  return f;
}

}  // namespace shardsim
