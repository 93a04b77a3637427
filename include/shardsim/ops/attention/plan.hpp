// Context-parallel sliding-window attention over a streamed chunk with a carried KV cache: the
// sharded plan beside the dense oracle of ops/attention/stream.hpp. Local phases touch only their
// rank's tensors; data crosses ranks only through the world's collectives.
//
// Per chunk (NAME = the step's output; every boundary below is recorded in this order):
//   1. NAME.q, NAME.k, NAME.v      x wq, x wk, x wv on every rank (x and the weights Replicate)
//   2. NAME.q_rot                  RoPE of the queries at their absolute positions, every rank
//   3. NAME.cache_k, NAME.cache_v  the cache carried in from the previous chunk (chunk >= 2),
//                                  Replicate (ulysses: all-gathered from its head groups here)
//   4. NAME.k_cat, NAME.v_shard    Shard(kv): each rank's torch.chunk slice of the KV axis
//                                  cache ++ chunk (cache keys RoPE'd, chunk keys raw); the axis
//                                  may be uneven or shorter than the group (empty shards)
//   5. NAME.k_shard                Shard(kv): each shard rotates its own chunk keys at their own
//                                  absolute positions P - L + g, before any collective
//   6. the mode (attention/allgather_plan.hpp, _ring_plan.hpp, _ulysses_plan.hpp) -> NAME.attn,
//      Replicate, and the cache written back (K after RoPE, C = min(window - 1, L + t) keys)
//   7. NAME                        attn wo on every rank, Replicate
// Backward (the cache is detached; see attention/stream.hpp): grad(NAME.attn) on every rank, the
// mode's backward, then grad(NAME.q) (inverse RoPE, every rank), grad(NAME.k_cat_shard) (inverse
// RoPE of each shard's chunk keys), grad(NAME.k_cat) and grad(NAME.v_all) (all_gather), and
// grad(NAME.k), grad(NAME.v) (the chunk part); the projections' gradients are Replicate.
#pragma once

#include "shardsim/ops/attention/allgather_plan.hpp"
#include "shardsim/ops/attention/plan_common.hpp"
#include "shardsim/ops/attention/ring_plan.hpp"
#include "shardsim/ops/attention/ulysses_plan.hpp"

namespace shardsim {

// Runs `kernel(r)` on every rank and assembles the results into a Replicate tensor, recorded.
template <typename T, typename Kernel>
DistTensor<T> replicated_phase(const World<T>& world, const std::string& name, const Shape& global,
                               const BoundaryLabel& label, Kernel kernel) {
  std::vector<Tensor<T>> locals(static_cast<std::size_t>(world.size()));
  world.for_each_rank([&](int r) { locals[static_cast<std::size_t>(r)] = kernel(r); });
  DistTensor<T> out = dist_from_locals(name, global, Placement::replicate(), std::move(locals));
  BoundaryLabel named = label;
  named.tensor = name;
  world.compare_boundary(named, out);
  return out;
}

// Forward of one chunk. x: (batch, seq=t, hidden) Replicate; weights Replicate. Reads and
// writes `cache`; returns NAME (batch, seq=t, hidden), Replicate.
template <typename T>
DistTensor<T> cp_attention_forward(const World<T>& world, const DistTensor<T>& x,
                                   const DistTensor<T>& wq, const DistTensor<T>& wk,
                                   const DistTensor<T>& wv, const DistTensor<T>& wo,
                                   const CpAttentionConfig& config, CpKvCache<T>& cache,
                                   CpAttentionSaved<T>& saved) {
  const int ranks = world.size();
  ChunkGeometry geo;
  geo.batch = x.global.extent("batch");
  geo.length = x.global.extent("seq");
  geo.heads = wq.global.extent("head");
  geo.dim = wq.global.extent("head_dim");
  geo.first = cache.next_position;
  if (cache.k.locals.empty()) {
    cache.k = make_dist<T>(config.part(AttentionPart::cache_k),
                           head_shape(geo.batch, "kv", 0, geo.heads, geo.dim),
                           Placement::replicate(), ranks);
    cache.v = make_dist<T>(config.part(AttentionPart::cache_v), cache.k.global,
                           Placement::replicate(), ranks);
  }
  geo.cached = cache.length();
  geo.keep = kv_cache_length(config.params.attention.window, geo.cached + geo.length);
  geo.kv_slices = shard_slices(geo.cached + geo.length, ranks, SplitPolicy::chunk);
  saved.geo = geo;

  // 1-2. Projections and query RoPE, replicated.
  const Shape chunk = geo.chunk_shape();
  const std::vector<std::int64_t> q_pos = geo.q_pos();
  auto project = [&](AttentionPart part, const DistTensor<T>& w) {
    return replicated_phase(world, config.part(part), chunk,
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
  saved.q_rot =
      replicated_phase(world, config.part(AttentionPart::q_rot), chunk,
                       {.op = "rope", .exact = true, .inputs = {saved.q.name}}, [&](int r) {
                         Tensor<T> y;
                         rope_forward(saved.q.local(r), q_pos, config.rope("seq"), y);
                         return y;
                       });

  // 3. The carried cache, Replicate on every rank.
  std::vector<std::string> k_sources{saved.k.name};
  std::vector<std::string> v_sources{saved.v.name};
  if (geo.cached > 0) {
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
    if (cache.k.placement.is_shard()) {
      cache.k = world.all_gather(cache.k, k_label);
      cache.v = world.all_gather(cache.v, v_label);
    } else {
      world.compare_boundary(k_label, cache.k);
      world.compare_boundary(v_label, cache.v);
    }
    k_sources.push_back(k_label.tensor);
    v_sources.push_back(v_label.tensor);
  }
  const CpKvCache<T> carried = cache;

  // 4-5. This rank's slice of cache ++ chunk; RoPE of its own chunk keys.
  std::vector<Tensor<T>> k_cat(static_cast<std::size_t>(ranks));
  std::vector<Tensor<T>> v_shard(static_cast<std::size_t>(ranks));
  world.for_each_rank([&](int r) {
    const Slice& slice = geo.kv_slices[static_cast<std::size_t>(r)];
    k_cat[static_cast<std::size_t>(r)] = kv_slice(carried.k.local(r), saved.k.local(r), slice);
    v_shard[static_cast<std::size_t>(r)] = kv_slice(carried.v.local(r), saved.v.local(r), slice);
  });
  const Placement kv = Placement::shard("kv");
  const DistTensor<T> k_cat_dist =
      dist_from_locals(config.part(AttentionPart::k_cat), geo.kv_shape(), kv, k_cat);
  world.compare_boundary(
      {.op = "kv_shard", .tensor = k_cat_dist.name, .exact = true, .inputs = k_sources},
      k_cat_dist);
  saved.v_shard =
      dist_from_locals(config.part(AttentionPart::v_shard), geo.kv_shape(), kv, v_shard);
  world.compare_boundary({.op = "kv_shard",
                          .tensor = saved.v_shard.name,
                          .dense = config.part(AttentionPart::v_all),
                          .exact = true,
                          .inputs = v_sources},
                         saved.v_shard);
  saved.rope_positions.assign(static_cast<std::size_t>(ranks), {});
  if (!config.faults.rope_after_gather_wrong_offset) {
    std::vector<Tensor<T>> k_shard = k_cat;
    world.for_each_rank([&](int r) {
      const Slice& slice = geo.kv_slices[static_cast<std::size_t>(r)];
      const std::int64_t first_local = geo.first_chunk_local(r);
      // Absolute positions; the rope_local_positions fault uses the index within the shard.
      std::vector<std::int64_t> positions =
          config.faults.rope_local_positions
              ? position_range(first_local, geo.chunk_keys(r))
              : position_range(geo.first - geo.cached + slice.begin + first_local,
                               geo.chunk_keys(r));
      rope_chunk_keys(k_shard[static_cast<std::size_t>(r)], first_local, positions,
                      config.rope("kv"), false);
      saved.rope_positions[static_cast<std::size_t>(r)] = std::move(positions);
    });
    saved.k_shard = dist_from_locals(config.part(AttentionPart::k_shard), geo.kv_shape(), kv,
                                     std::move(k_shard));
    world.compare_boundary({.op = "rope",
                            .tensor = saved.k_shard.name,
                            .dense = config.part(AttentionPart::k_all),
                            .exact = true,
                            .inputs = {k_cat_dist.name}},
                           saved.k_shard);
  }

  // 6. The mode, and the cache written back.
  switch (config.mode) {
    case CpMode::allgather:
      saved.attn = allgather_attention_forward(world, config, geo, k_cat_dist, saved);
      allgather_write_cache(world, geo, saved, cache);
      break;
    case CpMode::ring:
      saved.attn = ring_attention_forward(world, config, geo, saved, cache);
      break;
    case CpMode::ulysses:
      saved.attn = ulysses_attention_forward(world, config, geo, saved, cache);
      break;
  }
  if (config.faults.cache_raw_k) {
    // The bug: the cache keeps the chunk keys as projected, before RoPE.
    const std::vector<Slice> head_slices = shard_slices(geo.heads, ranks, SplitPolicy::chunk);
    world.for_each_rank([&](int r) {
      Tensor<T> raw = kv_tail(carried.k.local(r), saved.k.local(r), geo.keep);
      if (cache.k.placement.is_shard()) {
        const Slice& mine = head_slices[static_cast<std::size_t>(r)];
        raw = slice_along(raw, "head", mine.begin, mine.valid());
      }
      cache.k.local(r) = std::move(raw);
    });
  }
  cache.next_position = geo.first + geo.length;

  // 7. The output projection, replicated.
  return replicated_phase(
      world, config.name, x.global,
      {.op = "sliding_window_attention", .exact = true, .inputs = {saved.attn.name, wo.name}},
      [&](int r) {
        Tensor<T> y;
        project_out(saved.attn.local(r), wo.local(r), y);
        return y;
      });
}

// Gradients of one chunk's inputs and parameters, all Replicate. Parameter grads are fresh
// buffers (the caller accumulates them).
template <typename T>
struct CpAttentionGrads {
  DistTensor<T> x, wq, wk, wv, wo;
};

template <typename T>
CpAttentionGrads<T> cp_attention_backward(const World<T>& world, const DistTensor<T>& dy,
                                          const DistTensor<T>& x, const DistTensor<T>& wq,
                                          const DistTensor<T>& wk, const DistTensor<T>& wv,
                                          const DistTensor<T>& wo, const CpAttentionConfig& config,
                                          const CpAttentionSaved<T>& saved);

}  // namespace shardsim

#include "shardsim/ops/attention/plan_backward.hpp"
