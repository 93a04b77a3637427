// Shared vocabulary of the context-parallel attention plans (attention/plan.hpp): the cp modes,
// the seeded faults, the step's configuration, the carried per-rank KV cache, the chunk's
// geometry, what forward keeps for backward, and the per-rank helpers that build this rank's
// slice of the KV axis.
//
// Include graph (one way): plan_common.hpp <- allgather_plan.hpp, ring_plan.hpp,
// ulysses_plan.hpp <- plan_forward.hpp, plan_backward.hpp <- plan.hpp.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "core/world.hpp"
#include "ops/add/add_plan.hpp"
#include "ops/attention/attention.hpp"
#include "ops/attention/parts.hpp"
#include "ops/attention/project.hpp"
#include "ops/attention/rope.hpp"
#include "ops/attention/stream.hpp"
#include "ops/op_list.hpp"

namespace shardsim {

enum class CpMode { allgather, ring, ulysses };

inline std::string_view cp_mode_name(CpMode mode) {
  switch (mode) {
    case CpMode::allgather:
      return "allgather";
    case CpMode::ring:
      return "ring";
    case CpMode::ulysses:
      return "ulysses";
  }
  return "?";
}

inline CpMode parse_cp_mode(std::string_view text) {
  if (text == "allgather") return CpMode::allgather;
  if (text == "ring") return CpMode::ring;
  if (text == "ulysses") return CpMode::ulysses;
  throw InputError("unknown cp_mode '" + std::string(text) + "' (known: allgather, ring, ulysses)");
}

// Seeded bugs. They change the sharded plan only, never the oracle.
struct AttentionFaults {
  bool cache_raw_k = false;           // the cache keeps K before RoPE
  bool rope_local_positions = false;  // a shard rotates its keys at shard-local positions
  bool window_off_by_one = false;     // the mask allows q_pos - k_pos <= window
  // allgather only: no per-shard RoPE; RoPE once on the gathered chunk keys at positions offset
  // by the cache length a second time (gathered index g rotated at P + g instead of P - L + g).
  bool rope_after_gather_wrong_offset = false;
  // ring only: the merge of block results (ring_plan.hpp).
  bool ring_merge_no_max = false;        // log-sum-exp merge without subtracting the running max
  bool ring_merge_average = false;       // block outputs averaged, not weighted by their lse
  bool ring_backward_local_lse = false;  // backward normalizes each block by its own lse
  // sequence-sharded queries only: the mask reads each rank's query positions from 0 (its
  // local row index) while the keys keep their global positions (RoPE stays right).
  bool mask_local_query_positions = false;
  // zigzag-sharded queries only: the mask reads a rank's query positions as its first run's
  // offset plus the row index, as if its second run followed the first (RoPE stays right).
  bool mask_zigzag_contiguous = false;
};

struct CpAttentionConfig {
  std::string name;  // the step's output; its parts are named "NAME.q", "NAME.k_shard", ...
  StreamAttentionParams params;
  CpMode mode = CpMode::allgather;
  AttentionFaults faults;

  // The boundary name of one of this step's parts, "NAME.suffix" (attention/parts.hpp), and of
  // its gradient, "grad(NAME.suffix)".
  std::string part(AttentionPart which) const { return attention_part_name(name, which); }
  std::string part_grad(AttentionPart which) const { return grad_name(part(which)); }
  // The mask the sharded plan uses: the oracle's, widened by one key under window_off_by_one.
  AttentionParams attention() const {
    AttentionParams p = params.attention;
    p.window_inclusive = faults.window_off_by_one;
    return p;
  }
  // RoPE over the named position axis ("seq" for the chunk, "kv" on the KV axis).
  RopeParams rope(const std::string& pos_axis) const {
    RopeParams p = params.rope;
    p.pos_axis = pos_axis;
    return p;
  }
};

// The carried state on the ranks: Replicate in allgather and ring modes, Shard(head) in ulysses
// mode (each rank keeps its head group's keys). Empty (no locals) before the first chunk.
template <typename T>
struct CpKvCache {
  DistTensor<T> k;                 // (batch, kv=L, head, head_dim), after RoPE
  DistTensor<T> v;                 // (batch, kv=L, head, head_dim)
  std::int64_t next_position = 0;  // P of the next chunk

  std::int64_t length() const { return k.locals.empty() ? 0 : k.global.extent("kv"); }
  void reset() { *this = CpKvCache<T>(); }
};

// The geometry of one chunk, the same on every rank. Shapes are global; per-rank vectors are
// indexed by the rank's coordinate on the cp dim (World::coord).
struct ChunkGeometry {
  std::int64_t first = 0;                      // P: absolute position of the chunk's first token
  std::int64_t cached = 0;                     // L: keys in the cache read by this chunk
  std::int64_t length = 0;                     // t: tokens in the chunk
  std::int64_t keep = 0;                       // C: keys in the cache written back
  std::int64_t batch = 0, heads = 0, dim = 0;  // extents of batch, head and head_dim
  std::vector<Slice> kv_slices;  // per cp coordinate: its torch.chunk slice of the KV axis
  // Layouts: x's (Replicate on the cp dim `cp_dim`), so that every tensor of the plan keeps x's
  // placements on the other mesh dims; and the weights' gradients (Partial where x's rows are
  // sharded on another dim, each member summing its own rows).
  Layout base;
  int cp_dim = 0;
  Layout param_grad;

  Layout on(const Placement& placement) const { return base.with(cp_dim, placement); }

  Shape chunk_shape() const { return head_shape(batch, "seq", length, heads, dim); }
  Shape kv_shape() const { return head_shape(batch, "kv", cached + length, heads, dim); }
  Shape cache_shape() const { return head_shape(batch, "kv", keep, heads, dim); }
  Shape row_shape() const { return Shape({{"batch", batch}, {"seq", length}, {"head", heads}}); }
  std::vector<std::int64_t> q_pos() const { return position_range(first, length); }
  std::vector<std::int64_t> k_pos() const {
    return position_range(first - cached, cached + length);
  }
  // The chunk keys of coordinate `coord`'s KV slice (its keys at index >= L): the local index
  // of the first, and how many.
  std::int64_t first_chunk_local(int coord) const {
    const Slice& slice = kv_slices[static_cast<std::size_t>(coord)];
    return std::max(slice.begin, cached) - slice.begin;
  }
  std::int64_t chunk_keys(int coord) const {
    const Slice& slice = kv_slices[static_cast<std::size_t>(coord)];
    return std::max<std::int64_t>(0, slice.end - std::max(slice.begin, cached));
  }
};

// What forward keeps for backward (only the members of the plan's mode are filled). Shapes are
// global: chunk = (batch, seq=t, head, head_dim), KV axis = (batch, kv=L+t, head, head_dim).
template <typename T>
struct CpAttentionSaved {
  ChunkGeometry geo;
  DistTensor<T> q, k, v, q_rot, attn;  // chunk, Replicate
  DistTensor<T> k_shard, v_shard;      // KV axis, Shard(kv): this rank's RoPE'd keys, values
  std::vector<std::vector<std::int64_t>> rope_positions;  // per rank: positions of its chunk keys
  DistTensor<T> k_all, v_all;                             // allgather: KV axis, Replicate
  DistTensor<T> q_part;            // chunk; ring: Shard(seq), ulysses: Shard(head)
  DistTensor<T> k_heads, v_heads;  // ulysses: KV axis, Shard(head)
  DistTensor<T> attn_part;         // chunk; ring: Shard(seq), ulysses: Shard(head)
  DistTensor<T> lse;               // (batch, seq=t, head), placed like attn_part (allgather: R)
  std::vector<AttentionSaved<T>> core;  // allgather, ulysses: per rank, the kernel's statistics
};

// What a mode's attention backward hands back: gradients of the queries (Replicate) and of the
// RoPE'd keys and values. dk is Replicate (the whole gathered axis) when the
// rope_after_gather_wrong_offset fault is on, Shard(kv) otherwise.
template <typename T>
struct CoreGrads {
  DistTensor<T> q_rot;  // Replicate
  DistTensor<T> k;      // Shard(kv) (or Replicate, see above)
  DistTensor<T> v;      // Shard(kv)
};

// Positions of the KV axis: index g holds the key at absolute position P - L + g.
inline std::vector<std::int64_t> kv_positions(std::int64_t first, std::int64_t cached,
                                              const Slice& slice) {
  return position_range(first - cached + slice.begin, slice.valid());
}

// This rank's slice [begin, end) of the KV axis cache ++ chunk, from its own copies of the cache
// (batch, kv=L, head, head_dim) and of the chunk keys or values (batch, seq=t, head, head_dim).
// Returns (batch, kv=end-begin, head, head_dim).
template <typename T>
Tensor<T> kv_slice(const Tensor<T>& cache, const Tensor<T>& chunk, const Slice& slice) {
  const Shape& chunk_shape = chunk.shape();
  const std::int64_t cached = cache.shape().extent("kv");
  const std::int64_t chunk_length = chunk_shape.extent("seq");
  // (batch, kv=t, head, head_dim): the chunk renamed onto the KV axis.
  const Tensor<T> chunk_kv =
      chunk.reshaped(head_shape(chunk_shape.extent("batch"), "kv", chunk_length,
                                chunk_shape.extent("head"), chunk_shape.extent("head_dim")));
  Tensor<T> out(chunk_kv.shape().with_extent("kv", slice.valid()));
  const std::int64_t cache_end = std::min(slice.end, cached);
  if (slice.begin < cache_end) {
    copy_along(cache, "kv", slice.begin, out, 0, cache_end - slice.begin);
  }
  const std::int64_t chunk_begin = std::max(slice.begin, cached);
  if (chunk_begin < slice.end) {
    copy_along(chunk_kv, "kv", chunk_begin - cached, out, chunk_begin - slice.begin,
               slice.end - chunk_begin);
  }
  return out;
}

// The last `keep` positions of cache ++ chunk along kv, as kv_slice takes them.
// Returns (batch, kv=keep, head, head_dim).
template <typename T>
Tensor<T> kv_tail(const Tensor<T>& cache, const Tensor<T>& chunk, std::int64_t keep) {
  const std::int64_t total = cache.shape().extent("kv") + chunk.shape().extent("seq");
  return kv_slice(cache, chunk, Slice{total - keep, total, keep});
}

// Rotates, in place, the chunk positions of a rank's KV slice (batch, kv, head, head_dim) (the
// cache positions are RoPE'd already); `backward` applies the inverse rotation instead.
// `positions` gives one position per chunk key of the slice; `first_chunk_local` is the local
// index of the slice's first chunk key.
template <typename T>
void rope_chunk_keys(Tensor<T>& slice, std::int64_t first_chunk_local,
                     const std::vector<std::int64_t>& positions, const RopeParams& rope,
                     bool backward) {
  const std::int64_t count = static_cast<std::int64_t>(positions.size());
  if (count == 0) return;
  const Tensor<T> part = slice_along(slice, "kv", first_chunk_local, count);  // (b, kv=count, h, d)
  Tensor<T> turned;
  if (backward) {
    rope_backward(part, positions, rope, turned);
  } else {
    rope_forward(part, positions, rope, turned);
  }
  copy_along(turned, "kv", 0, slice, first_chunk_local, count);
}

// A DistTensor from per-rank locals built in a local phase. REQUIRES (asserted): each local has
// the shape `layout` gives its rank.
template <typename T>
DistTensor<T> dist_from_locals(const World<T>& world, std::string name, const Shape& global,
                               const Layout& layout, std::vector<Tensor<T>> locals) {
  DistTensor<T> out{std::move(name), global, layout, world.mesh_ptr(), std::move(locals)};
  for (int r = 0; r < out.ranks(); ++r) {
    if (!out.held(r)) continue;  // another process's rank (transport.hpp)
    SHARDSIM_ASSERT(out.local(r).shape() == local_shape(global, layout, world.mesh(), r),
                    "a local does not have the shape its layout gives");
  }
  return out;
}

// Runs `kernel(r)` (returning that rank's copy of the result) on every rank and assembles the
// results into a tensor laid out as `layout` (Replicate on the cp dim) named `name`, recorded
// under `label` with that name.
template <typename T, typename Kernel>
DistTensor<T> replicated_phase(const World<T>& world, const std::string& name, const Shape& global,
                               const Layout& layout, const BoundaryLabel& label, Kernel kernel) {
  std::vector<Tensor<T>> locals(static_cast<std::size_t>(world.size()));
  world.for_each_rank([&](int r) { locals[static_cast<std::size_t>(r)] = kernel(r); });
  DistTensor<T> out = dist_from_locals(world, name, global, layout, std::move(locals));
  BoundaryLabel named = label;
  named.tensor = name;
  world.compare_boundary(named, out);
  return out;
}

}  // namespace shardsim
