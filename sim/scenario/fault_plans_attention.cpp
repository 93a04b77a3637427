// The attention rules of Loader::fault_plans (fault_plans.cpp lists them all): a window the
// sequence reaches, a second streamed chunk, queries off their row indices, keys split between
// ranks for the ring's merge.
#include <algorithm>
#include <string>
#include <vector>

#include "scenario/fault_plans_internal.hpp"

namespace shardsim::fault_plans {

namespace {

// Whether the query positions a mask fault gives some rank (sharded_common.hpp
// mask_query_positions) differ from its queries' real ones, for some attention step with
// sharded queries. Judged without [stream] (a later chunk starts past position 0) and where the
// step's dim alone shards seq; otherwise taken as differing.
bool mask_positions_differ(Fault fault, const Scenario& s) {
  return any_step<SlidingWindowAttentionArgs>(
      s, OpKind::sliding_window_attention, [&](const StepSpec& st, const auto& a) {
        if (s.stream || axis_sharded_elsewhere(s, a.input, st.mesh_dim)) return true;
        for (const Slice& share : slices_on(s, a.input, st.mesh_dim)) {
          const std::vector<std::int64_t> real = slice_positions(share);
          const std::int64_t from = fault == Fault::mask_local_query_positions ? 0 : share.begin;
          for (std::size_t i = 0; i < real.size(); ++i) {
            if (real[i] != from + static_cast<std::int64_t>(i)) return true;
          }
        }
        return false;
      });
}

// Whether some ring attention step splits its keys between two or more ranks: the KV axis is
// the sequence split over the step's dim like sharded queries, or as torch.chunk when the
// queries are Replicate (judged without [stream], where a cache joins the keys).
bool ring_blocks_merge(const Scenario& s) {
  return any_step<SlidingWindowAttentionArgs>(
      s, OpKind::sliding_window_attention, [&](const StepSpec& st, const auto& a) {
        const Scenario::TensorLayout* t = layout_of(s, a.input);
        if (a.cp_mode != "ring" || st.mesh_dim >= s.mesh.devices.ndim()) return false;
        const int ranks = s.mesh.devices.dim(st.mesh_dim).size;
        if (ranks < 2) return false;
        if (s.stream || t == nullptr || !t->shape.has("seq")) return true;
        const Placement on = on_step_dim(s, st, a.input);
        if (on.is_shard()) return on.axis != "seq" || pieces_on_step_dim(s, st, a.input);
        return two_or_more_hold(shard_slices(t->shape.extent("seq"), ranks, SplitPolicy::chunk));
      });
}

}  // namespace

// The attention faults that need a window, a carried cache, or queries off their row indices.
std::string attention_effect(Fault fault, const Scenario& s) {
  switch (fault) {
    case Fault::window_off_by_one:
      if (any_step<SlidingWindowAttentionArgs>(
              s, OpKind::sliding_window_attention, [&](const StepSpec&, const auto& a) {
                const Scenario::TensorLayout* t = layout_of(s, a.input);
                return a.window && t != nullptr && t->shape.has("seq") &&
                       *a.window < t->shape.extent("seq");
              })) {
        return "";
      }
      return "it admits the key at distance `window`, and no sliding_window_attention here has "
             "a window shorter than its sequence (plain causal attention has no window)";
    case Fault::ring_merge_no_max:
    case Fault::ring_merge_average:
    case Fault::ring_backward_local_lse:
      if (ring_blocks_merge(s)) return "";
      return "it changes how the ring merges the KV blocks of two or more ranks, and every ring "
             "step here has its keys on one rank (a sequence too short, or a dim of one rank)";
    case Fault::mask_local_query_positions:
    case Fault::mask_zigzag_contiguous:
      if (mask_positions_differ(fault, s)) return "";
      return fault == Fault::mask_local_query_positions
                 ? "it masks a rank's queries at their local row indices, which are their "
                   "positions on every rank here (only the first rank holds queries)"
                 : "it masks a zigzag share's second run as if it followed the first, and every "
                   "share here is one contiguous run (the sequence is too short for a second "
                   "run that does not follow the first)";
    case Fault::cache_raw_k:
    case Fault::rope_after_gather_wrong_offset:
      if (s.stream && s.stream->chunks.size() >= 2) return "";
      return "it changes the keys carried into a later chunk, and this scenario streams no second "
             "chunk ([stream] with two or more chunks)";
    default:
      return "";
  }
}

}  // namespace shardsim::fault_plans
