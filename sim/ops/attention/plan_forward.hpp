// Forward of the context-parallel attention plan over one streamed chunk: phases 1-7 of
// attention/plan.hpp, each a function below, recorded in that order.
#pragma once

#include "ops/attention/allgather_plan.hpp"
#include "ops/attention/plan_common.hpp"
#include "ops/attention/ring_plan.hpp"
#include "ops/attention/ulysses_plan.hpp"

namespace shardsim {

namespace detail {

// The chunk's geometry, the same on every rank. Before the first chunk it also gives `cache`
// empty (kv = 0) Replicate tensors, so every later phase reads a cache of the right rank.
template <typename T>
ChunkGeometry cp_chunk_geometry(const World<T>& world, const DistTensor<T>& x,
                                const DistTensor<T>& wq, const CpAttentionConfig& config,
                                CpKvCache<T>& cache) {
  ChunkGeometry geo;
  geo.cp_dim = world.dim();
  geo.base = x.layout;
  geo.param_grad = row_sum_grad_layout(x.layout, x.layout);
  geo.batch = x.global.extent("batch");
  geo.length = x.global.extent("seq");
  geo.heads = wq.global.extent("head");
  geo.dim = wq.global.extent("head_dim");
  geo.first = cache.next_position;
  if (cache.k.locals.empty()) {
    cache.k = world.make(config.part(AttentionPart::cache_k),
                         head_shape(geo.batch, "kv", 0, geo.heads, geo.dim),
                         geo.on(Placement::replicate()));
    cache.v = world.make(config.part(AttentionPart::cache_v), cache.k.global,
                         geo.on(Placement::replicate()));
  }
  geo.cached = cache.length();
  geo.keep = kv_cache_length(config.params.attention.window, geo.cached + geo.length);
  geo.kv_slices = shard_slices(geo.cached + geo.length, world.group_size(), SplitPolicy::chunk);
  return geo;
}

// Phases 1-2: NAME.q, NAME.k, NAME.v = x wq, x wk, x wv and NAME.q_rot = RoPE of the queries at
// their absolute positions, each (batch, seq=t, head, head_dim) Replicate, on every rank.
template <typename T>
void cp_project_chunk(const World<T>& world, const CpAttentionConfig& config,
                      const ChunkGeometry& geo, const DistTensor<T>& x, const DistTensor<T>& wq,
                      const DistTensor<T>& wk, const DistTensor<T>& wv,
                      CpAttentionSaved<T>& saved) {
  const Shape chunk = geo.chunk_shape();
  const std::vector<std::int64_t> q_pos = geo.q_pos();
  auto project = [&](AttentionPart part, const DistTensor<T>& w) {
    return replicated_phase(world, config.part(part), chunk, geo.on(Placement::replicate()),
                            {.op = "attention_project", .exact = true, .inputs = {x.name, w.name}},
                            [&](int r) {
                              Tensor<T> y;
                              project_heads(x.local(r), w.local(r), y);
                              return y;
                            });
  };
  saved.q = project(AttentionPart::q, wq);
  saved.k = project(AttentionPart::k, wk);
  saved.v = project(AttentionPart::v, wv);
  saved.q_rot = replicated_phase(
      world, config.part(AttentionPart::q_rot), chunk, geo.on(Placement::replicate()),
      {.op = "rope", .exact = true, .inputs = {saved.q.name}}, [&](int r) {
        Tensor<T> y;
        rope_forward(saved.q.local(r), q_pos, config.rope("seq"), y);
        return y;
      });
}

// The boundary names the KV shards of phase 4 are computed from.
struct CpKvSources {
  std::vector<std::string> k;
  std::vector<std::string> v;
};

// Phase 3: the carried cache NAME.cache_k, NAME.cache_v (chunk >= 2), made Replicate on every
// rank (ulysses keeps it per head group and all-gathers it here). Returns what phase 4 reads.
template <typename T>
CpKvSources cp_read_cache(const World<T>& world, const CpAttentionConfig& config,
                          const ChunkGeometry& geo, const CpAttentionSaved<T>& saved,
                          CpKvCache<T>& cache) {
  CpKvSources sources{{saved.k.name}, {saved.v.name}};
  if (geo.cached == 0) return sources;
  const bool ulysses = config.mode == CpMode::ulysses;
  const AttentionPart k_source = ulysses ? AttentionPart::k_heads : AttentionPart::k_shard;
  const AttentionPart v_source = ulysses ? AttentionPart::v_heads : AttentionPart::v_shard;
  const BoundaryLabel k_label{.op = "kv_cache",
                              .tensor = config.part(AttentionPart::cache_k),
                              .exact = true,
                              .inputs = {config.part(k_source)}};
  const BoundaryLabel v_label{.op = "kv_cache",
                              .tensor = config.part(AttentionPart::cache_v),
                              .exact = true,
                              .inputs = {config.part(v_source)}};
  if (world.placement(cache.k).is_shard()) {
    cache.k = world.all_gather(cache.k, k_label);
    cache.v = world.all_gather(cache.v, v_label);
  } else {
    world.compare_boundary(k_label, cache.k);
    world.compare_boundary(v_label, cache.v);
  }
  sources.k.push_back(k_label.tensor);
  sources.v.push_back(v_label.tensor);
  return sources;
}

// Phase 4: each rank's torch.chunk slice of the KV axis cache ++ chunk, Shard(kv) of
// (batch, kv=L+t, head, head_dim): returns NAME.k_cat (cache keys RoPE'd, chunk keys raw) and
// sets saved.v_shard = NAME.v_shard. `carried` is the Replicate cache of phase 3.
template <typename T>
DistTensor<T> cp_split_kv_axis(const World<T>& world, const CpAttentionConfig& config,
                               const ChunkGeometry& geo, const CpKvCache<T>& carried,
                               const CpKvSources& sources, CpAttentionSaved<T>& saved) {
  const auto count = static_cast<std::size_t>(world.size());
  std::vector<Tensor<T>> k_cat(count);    // per rank: (batch, kv=slice, head, head_dim)
  std::vector<Tensor<T>> v_shard(count);  // per rank: (batch, kv=slice, head, head_dim)
  world.for_each_rank([&](int r) {
    const auto at = static_cast<std::size_t>(r);
    const Slice& slice = geo.kv_slices[static_cast<std::size_t>(world.coord(r))];
    k_cat[at] = kv_slice(carried.k.local(r), saved.k.local(r), slice);
    v_shard[at] = kv_slice(carried.v.local(r), saved.v.local(r), slice);
  });
  const Placement kv = Placement::shard("kv");
  DistTensor<T> k_cat_dist = dist_from_locals(world, config.part(AttentionPart::k_cat),
                                              geo.kv_shape(), geo.on(kv), std::move(k_cat));
  world.compare_boundary(
      {.op = "kv_shard", .tensor = k_cat_dist.name, .exact = true, .inputs = sources.k},
      k_cat_dist);
  saved.v_shard = dist_from_locals(world, config.part(AttentionPart::v_shard), geo.kv_shape(),
                                   geo.on(kv), std::move(v_shard));
  world.compare_boundary({.op = "kv_shard",
                          .tensor = saved.v_shard.name,
                          .dense = config.part(AttentionPart::v_all),
                          .exact = true,
                          .inputs = sources.v},
                         saved.v_shard);
  return k_cat_dist;
}

// Phase 5: each shard rotates its own chunk keys at their absolute positions P - L + g, before
// any collective -> saved.k_shard = NAME.k_shard (Shard(kv)), and saved.rope_positions for the
// inverse rotation. Skipped under rope_after_gather_wrong_offset, which rotates after the
// gather instead (allgather_plan.hpp).
template <typename T>
void cp_rope_shard_keys(const World<T>& world, const CpAttentionConfig& config,
                        const ChunkGeometry& geo, const DistTensor<T>& k_cat,
                        CpAttentionSaved<T>& saved) {
  saved.rope_positions.assign(static_cast<std::size_t>(world.size()), {});
  if (config.faults.rope_after_gather_wrong_offset) return;
  std::vector<Tensor<T>> k_shard = k_cat.locals;  // per rank: (batch, kv=slice, head, head_dim)
  world.for_each_rank([&](int r) {
    const int coord = world.coord(r);
    const Slice& slice = geo.kv_slices[static_cast<std::size_t>(coord)];
    const std::int64_t first_local = geo.first_chunk_local(coord);
    // Absolute positions; the rope_local_positions fault uses the index within the shard.
    std::vector<std::int64_t> positions =
        config.faults.rope_local_positions
            ? position_range(first_local, geo.chunk_keys(coord))
            : position_range(geo.first - geo.cached + slice.begin + first_local,
                             geo.chunk_keys(coord));
    rope_chunk_keys(k_shard[static_cast<std::size_t>(r)], first_local, positions, config.rope("kv"),
                    false);
    saved.rope_positions[static_cast<std::size_t>(r)] = std::move(positions);
  });
  saved.k_shard = dist_from_locals(world, config.part(AttentionPart::k_shard), geo.kv_shape(),
                                   geo.on(Placement::shard("kv")), std::move(k_shard));
  world.compare_boundary({.op = "rope",
                          .tensor = saved.k_shard.name,
                          .dense = config.part(AttentionPart::k_all),
                          .exact = true,
                          .inputs = {k_cat.name}},
                         saved.k_shard);
}

// Phase 6: the mode's attention -> saved.attn = NAME.attn (Replicate), and the cache written
// back (K after RoPE, C = min(window - 1, L + t) keys).
template <typename T>
void cp_core_forward(const World<T>& world, const CpAttentionConfig& config,
                     const ChunkGeometry& geo, const DistTensor<T>& k_cat,
                     CpAttentionSaved<T>& saved, CpKvCache<T>& cache) {
  switch (config.mode) {
    case CpMode::allgather:
      saved.attn = allgather_attention_forward(world, config, geo, k_cat, saved);
      allgather_write_cache(world, geo, saved, cache);
      break;
    case CpMode::ring:
      saved.attn = ring_attention_forward(world, config, geo, saved, cache);
      break;
    case CpMode::ulysses:
      saved.attn = ulysses_attention_forward(world, config, geo, saved, cache);
      break;
  }
}

// The cache_raw_k fault, after phase 6: the cache keeps the chunk keys as projected, before
// RoPE (placed as the mode left it: Replicate, or the rank's head group under ulysses).
template <typename T>
void cp_write_raw_k_cache(const World<T>& world, const ChunkGeometry& geo,
                          const CpKvCache<T>& carried, const CpAttentionSaved<T>& saved,
                          CpKvCache<T>& cache) {
  const std::vector<Slice> head_slices =
      shard_slices(geo.heads, world.group_size(), SplitPolicy::chunk);
  world.for_each_rank([&](int r) {
    // (batch, kv=C, head, head_dim)
    Tensor<T> raw = kv_tail(carried.k.local(r), saved.k.local(r), geo.keep);
    if (world.placement(cache.k).is_shard()) {
      const Slice& mine = head_slices[static_cast<std::size_t>(world.coord(r))];
      raw = slice_along(raw, "head", mine.begin, mine.valid());
    }
    cache.k.local(r) = std::move(raw);
  });
}

}  // namespace detail

// Forward of one chunk. x: (batch, seq=t, hidden) Replicate; weights Replicate. Reads and
// writes `cache`; fills `saved` for cp_attention_backward; returns NAME (batch, seq=t, hidden),
// Replicate.
template <typename T>
DistTensor<T> cp_attention_forward(const World<T>& world, const DistTensor<T>& x,
                                   const DistTensor<T>& wq, const DistTensor<T>& wk,
                                   const DistTensor<T>& wv, const DistTensor<T>& wo,
                                   const CpAttentionConfig& config, CpKvCache<T>& cache,
                                   CpAttentionSaved<T>& saved) {
  const ChunkGeometry geo = detail::cp_chunk_geometry(world, x, wq, config, cache);
  saved.geo = geo;
  detail::cp_project_chunk(world, config, geo, x, wq, wk, wv, saved);
  const detail::CpKvSources sources = detail::cp_read_cache(world, config, geo, saved, cache);
  const CpKvCache<T> carried = cache;  // phase 6 overwrites `cache`
  const DistTensor<T> k_cat = detail::cp_split_kv_axis(world, config, geo, carried, sources, saved);
  detail::cp_rope_shard_keys(world, config, geo, k_cat, saved);
  detail::cp_core_forward(world, config, geo, k_cat, saved, cache);
  if (config.faults.cache_raw_k) detail::cp_write_raw_k_cache(world, geo, carried, saved, cache);
  cache.next_position = geo.first + geo.length;

  // Phase 7: NAME = attn wo, on every rank.
  return replicated_phase(world, config.name, x.global, geo.on(Placement::replicate()),
                          {.op = op_label(OpKind::sliding_window_attention),
                           .exact = true,
                           .inputs = {saved.attn.name, wo.name}},
                          [&](int r) {
                            Tensor<T> y;
                            project_out(saved.attn.local(r), wo.local(r), y);
                            return y;
                          });
}

}  // namespace shardsim
