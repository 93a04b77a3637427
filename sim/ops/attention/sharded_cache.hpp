// The streamed KV cache of context-parallel attention with sequence-sharded queries
// (attention/sharded_plan.hpp, CpShardedCache in sharded_common.hpp): reading it at the start of
// a chunk, each rank's KV block (its cache ++ its own chunk keys), the ring all-gather of blocks
// of different lengths, and the cache written back after the chunk.
//
// A chunk of t tokens at absolute positions P .. P+t-1 reads a cache of L keys at P-L .. P-1 and
// leaves the window's tail, the C = min(window - 1, L + t) latest keys (kv_cache_length), as the
// dense oracle does (attention/stream.hpp). allgather and ring keep on every rank the tokens it
// owned (its cache ++ its share of the chunk, cut to the tail); ulysses keeps each head group's
// tail. K is cached after RoPE (the cache_raw_k fault caches the owners' raw keys instead).
#pragma once

#include <utility>
#include <vector>

#include "ops/attention/ring_plan.hpp"
#include "ops/attention/sharded_common.hpp"

namespace shardsim {

namespace detail {

// Copies row i of `rows` (batch, kv=n, head, head_dim) to row positions[i] - base of `out`
// (batch, kv=m, head, head_dim), for every i whose target lies in [0, m).
template <typename T>
void place_rows(const Tensor<T>& rows, const std::vector<std::int64_t>& positions,
                std::int64_t base, Tensor<T>& out) {
  const std::int64_t extent = out.shape().extent("kv");
  for (std::size_t i = 0; i < positions.size(); ++i) {
    const std::int64_t at = positions[i] - base;
    if (at >= 0 && at < extent) copy_along(rows, "kv", static_cast<std::int64_t>(i), out, at, 1);
  }
}

// The ring all-gather of blocks of different lengths (NCCL's ring algorithm): blocks[r] (batch,
// kv=n_r, head, head_dim) holds the keys at coord_positions[coordinate of r]; after k - 1
// send/recv hops every member holds every block and has placed each at its owner's positions in
// (batch, kv=extent, head, head_dim), position base + j at row j. The blocks are no Shard layout
// of the KV axis (a rank's tokens of several chunks), so the world's all_gather cannot move them.
template <typename T>
std::vector<Tensor<T>> ring_gather_rows(
    const World<T>& world, std::vector<Tensor<T>> blocks,
    const std::vector<std::vector<std::int64_t>>& coord_positions, std::int64_t base,
    std::int64_t extent) {
  const int k = world.group_size();
  std::vector<Tensor<T>> out(static_cast<std::size_t>(world.size()));
  world.for_each_rank([&](int r) {
    const auto at = static_cast<std::size_t>(r);
    out[at] = Tensor<T>(blocks[at].shape().with_extent("kv", extent));
  });
  for (int hop = 0; hop < k; ++hop) {
    world.for_each_rank([&](int r) {
      const auto at = static_cast<std::size_t>(r);
      const auto owner = static_cast<std::size_t>(ring_owner(world.coord(r), hop, k));
      place_rows(blocks[at], coord_positions[owner], base, out[at]);
    });
    if (hop + 1 < k) blocks = world.ring_send_recv(blocks);
  }
  return out;
}

}  // namespace detail

// Before the first chunk: an empty cache (kv = 0 on every rank, in the mode's placement). `k` is
// the chunk's raw keys (Shard(seq)).
template <typename T>
void sharded_cache_begin(const World<T>& world, const CpAttentionConfig& config,
                         const DistTensor<T>& k, CpShardedCache<T>& cache) {
  if (config.mode == CpMode::ulysses) {
    if (!cache.k_heads.locals.empty()) return;
    const Shape& g = k.global;  // (batch, seq, head, head_dim)
    const Shape empty =
        head_shape(g.extent("batch"), "kv", 0, g.extent("head"), g.extent("head_dim"));
    const Layout heads =
        detail::kv_layout(k.layout, world.dim()).with(world.dim(), Placement::shard("head"));
    cache.k_heads = world.make(config.part(AttentionPart::cache_k), empty, heads);
    cache.v_heads = world.make(config.part(AttentionPart::cache_v), empty, heads);
    return;
  }
  if (!cache.k.empty()) return;
  const auto count = static_cast<std::size_t>(world.size());
  cache.k.assign(count, {});
  cache.v.assign(count, {});
  cache.coord_positions.assign(static_cast<std::size_t>(world.group_size()), {});
  world.for_each_rank([&](int r) {
    const auto at = static_cast<std::size_t>(r);
    cache.k[at] = Tensor<T>(detail::renamed(k.local(r), "kv").shape().with_extent("kv", 0));
    cache.v[at] = cache.k[at];
  });
}

// The cache as the chunk reads it (from the second chunk on), recorded before the chunk's own
// keys, so that its exactness claim follows the keys it was cut from: the previous chunk's
// (NAME.k_shard, ulysses NAME.k_heads) and, when it holds older keys, the previous cache read's
// (every key older than the previous chunk that is still in the tail was in that cache):
//   allgather: the owners' cached rows all-gathered by the ring (ring_gather_rows) into
//              NAME.cache_k, NAME.cache_v (batch, kv=L, head, head_dim), Replicate;
//   ulysses:   each head group's cache, Shard(head), recorded as held;
//   ring:      nothing: the cached rows travel inside the KV blocks (sharded_ring_plan.hpp).
template <typename T>
void sharded_read_cache(const World<T>& world, const CpAttentionConfig& config,
                        const CpShardedCache<T>& cache, const CpShardedSaved<T>& saved,
                        DistTensor<T>& cache_k, DistTensor<T>& cache_v) {
  if (saved.cached == 0 || config.mode == CpMode::ring) return;
  const bool ulysses = config.mode == CpMode::ulysses;
  auto label = [&](AttentionPart part, AttentionPart source) {
    BoundaryLabel out{.op = "kv_cache", .tensor = config.part(part), .exact = true};
    out.inputs.push_back(config.part(source));
    if (cache.length > cache.written_by) out.inputs.push_back(out.tensor);
    return out;
  };
  const BoundaryLabel k_label =
      label(AttentionPart::cache_k, ulysses ? AttentionPart::k_heads : AttentionPart::k_shard);
  const BoundaryLabel v_label =
      label(AttentionPart::cache_v, ulysses ? AttentionPart::v_heads : AttentionPart::v_shard);
  if (config.mode == CpMode::ulysses) {
    // Copies: the boundary hook may round a stored value in place (a narrow run); the cache is
    // an op's internal part, which it leaves as it is.
    DistTensor<T> k_heads = cache.k_heads;
    DistTensor<T> v_heads = cache.v_heads;
    world.compare_boundary(k_label, k_heads);
    world.compare_boundary(v_label, v_heads);
    return;
  }
  const std::int64_t base = saved.first - saved.cached;
  const Shape& g = saved.q_rot.global;  // (batch, seq, head, head_dim)
  const Shape shape =
      head_shape(g.extent("batch"), "kv", saved.cached, g.extent("head"), g.extent("head_dim"));
  const Layout replicated =
      detail::kv_layout(saved.q_rot.layout, world.dim()).with(world.dim(), Placement::replicate());
  auto gather = [&](const std::vector<Tensor<T>>& rows, const BoundaryLabel& label) {
    DistTensor<T> all = dist_from_locals(
        world, label.tensor, shape, replicated,
        detail::ring_gather_rows(world, rows, cache.coord_positions, base, saved.cached));
    world.compare_boundary(label, all);
    return all;
  };
  cache_k = gather(cache.k, k_label);
  cache_v = gather(cache.v, v_label);
}

// allgather and ring: every rank's KV block, its cache ++ its own rotated chunk keys
// (saved.k_shard) and values, into saved.k_blocks, saved.v_blocks.
template <typename T>
void sharded_kv_blocks(const World<T>& world, const CpShardedCache<T>& cache,
                       CpShardedSaved<T>& saved) {
  const auto count = static_cast<std::size_t>(world.size());
  saved.k_blocks.assign(count, {});
  saved.v_blocks.assign(count, {});
  world.for_each_rank([&](int r) {
    const auto at = static_cast<std::size_t>(r);
    saved.k_blocks[at] = concat_along(cache.k[at], saved.k_shard.local(r), "kv");
    saved.v_blocks[at] = concat_along(cache.v[at], saved.v_shard.local(r), "kv");
  });
}

// After the chunk: the tail of the keys (and values) it attended, C = min(window - 1, L + t)
// positions, P + t - C .. P + t - 1, kept where the mode keeps them; P += t. `k` is the chunk's
// raw keys (Shard(seq)), which the cache_raw_k fault caches at their owners instead of the
// rotated ones (its cached rows are raw already).
template <typename T>
void sharded_write_cache(const World<T>& world, const CpAttentionConfig& config,
                         const DistTensor<T>& k, const CpShardedSaved<T>& saved,
                         CpShardedCache<T>& cache) {
  const std::int64_t length = saved.q_rot.global.extent("seq");
  const std::int64_t keep = kv_cache_length(config.params.attention.window, saved.cached + length);
  const std::int64_t tail = saved.first + length - keep;  // the first position kept
  cache.next_position = saved.first + length;
  cache.length = keep;
  cache.written_by = length;
  if (config.mode == CpMode::ulysses) {
    const std::int64_t from = saved.cached + length - keep;
    auto cut = [&](const std::vector<Tensor<T>>& group, DistTensor<T>& out) {
      std::vector<Tensor<T>> locals(static_cast<std::size_t>(world.size()));
      world.for_each_rank([&](int r) {
        const auto at = static_cast<std::size_t>(r);
        locals[at] = slice_along(group[at], "kv", from, keep);
      });
      out = dist_from_locals(world, out.name, out.global.with_extent("kv", keep), out.layout,
                             std::move(locals));
    };
    cut(saved.k_group, cache.k_heads);
    cut(saved.v_group, cache.v_heads);
    return;
  }
  std::vector<std::int64_t> first_kept(saved.coord_positions.size());
  for (std::size_t c = 0; c < saved.coord_positions.size(); ++c) {
    const std::vector<std::int64_t>& positions = saved.coord_positions[c];
    const auto kept = std::lower_bound(positions.begin(), positions.end(), tail);
    first_kept[c] = kept - positions.begin();
    cache.coord_positions[c].assign(kept, positions.end());
  }
  world.for_each_rank([&](int r) {
    const auto at = static_cast<std::size_t>(r);
    const std::int64_t from = first_kept[static_cast<std::size_t>(world.coord(r))];
    const Tensor<T> keys = config.faults.cache_raw_k
                               ? concat_along(cache.k[at], detail::renamed(k.local(r), "kv"), "kv")
                               : saved.k_blocks[at];
    const std::int64_t rows = keys.shape().extent("kv");
    cache.k[at] = slice_along(keys, "kv", from, rows - from);
    cache.v[at] = slice_along(saved.v_blocks[at], "kv", from, rows - from);
  });
}

}  // namespace shardsim
