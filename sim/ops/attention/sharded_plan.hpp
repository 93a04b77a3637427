// Context-parallel attention with sequence-sharded queries: the input x is Shard(seq) on the cp
// dim (split chunk, balanced or zigzag: placement.hpp), so every cp rank owns its own tokens end
// to end, at their absolute positions (a zigzag rank's two runs included). Streamed ([stream]),
// each chunk of t tokens is sharded on its own axis and sits at P .. P+t-1 after the L cached
// keys at P-L .. P-1 (attention/sharded_cache.hpp: the cache stays on the tokens' owners, or on
// the head groups in ulysses); without [stream] there is one chunk, P = L = 0. Per chunk:
//
//   1. NAME.q, NAME.k, NAME.v = x wq, x wk, x wv on each rank's own tokens (Shard(seq)), exact;
//   2. NAME.q_rot: each rank rotates its queries at their absolute positions, exact;
//   3. the cache as read (chunk >= 2; allgather: NAME.cache_k, NAME.cache_v gathered from the
//      owners, ulysses: per head group; ring: none), exact;
//   4. NAME.k_shard: each rank rotates its keys at their absolute positions and renames its rows
//      onto the KV axis (Shard(kv) with x's split, compared with the oracle's NAME.k_all, or
//      from chunk 2 on its last t keys NAME.k_new); NAME.v_shard likewise, exact;
//   5. the mode's attention over cache ++ chunk, every mask on global query and key positions
//      (0 <= q_pos - k_pos < window) -> NAME.attn, Shard(seq) like x:
//        allgather  NAME.k_all, NAME.v_all all-gathered (Replicate on the cp dim: only the keys
//                   and values move, never the queries; from chunk 2 on the chunk's as NAME.k_new,
//                   NAME.v_new, appended to the gathered cache); NAME.lse, NAME.attn: each rank's
//                   queries against every key, exact (the oracle's rows);
//        ring       the KV blocks (cache ++ own keys) travel the cp group
//                   (attention/sharded_ring_plan.hpp);
//        ulysses    all-to-all to head groups and back (attention/sharded_ulysses_plan.hpp);
//      then the cache written back (the window's tail);
//   6. NAME = attn wo on each rank's rows, Shard(seq), exact.
// Backward: grad(NAME.attn) and the Partial grad(wo) on each rank's rows; the mode's attention
// backward gives grad(NAME.q_rot) (Shard(seq)) and grad(NAME.k_shard), grad(NAME.v_shard) at
// the keys' owners (Shard(kv); the cached keys are detached, their gradients dropped): allgather
// runs the block backward of each rank's queries against every key and reduce-scatters the
// Partial dK/dV of the chunk's keys to their owners; then inverse RoPE at the owners' positions;
// the input projections give grad(x) (Shard(seq)) and the weights' gradients, Partial on every
// dim that splits the rows.
#pragma once

#include <string>
#include <vector>

#include "ops/attention/plan_backward.hpp"
#include "ops/attention/sharded_cache.hpp"
#include "ops/attention/sharded_common.hpp"
#include "ops/attention/sharded_ring_plan.hpp"
#include "ops/attention/sharded_ulysses_plan.hpp"

namespace shardsim {

namespace detail {

// Phase 3: every rank's keys RoPE'd at its positions and its values, renamed onto the KV axis:
// saved.k_shard (NAME.k_shard) and saved.v_shard (NAME.v_shard), Shard(kv) with x's split.
template <typename T>
void sharded_keys_values(const World<T>& world, const CpAttentionConfig& config,
                         const DistTensor<T>& k, const DistTensor<T>& v, CpShardedSaved<T>& saved) {
  const Shape& g = k.global;  // (batch, seq, head, head_dim)
  const Shape kv =
      head_shape(g.extent("batch"), "kv", g.extent("seq"), g.extent("head"), g.extent("head_dim"));
  const Layout kv_rows = kv_layout(k.layout, world.dim());
  saved.k_shard =
      replicated_phase(world, config.part(AttentionPart::k_shard), kv, kv_rows,
                       {.op = "rope",
                        .dense = config.part(saved.chunk_keys_part()),
                        .exact = true,
                        .inputs = {k.name}},
                       [&](int r) {
                         Tensor<T> y;
                         rope_forward(k.local(r), saved.positions[static_cast<std::size_t>(r)],
                                      config.rope("seq"), y);
                         return renamed(y, "kv");
                       });
  saved.v_shard = replicated_phase(world, config.part(AttentionPart::v_shard), kv, kv_rows,
                                   {.op = "kv_shard",
                                    .dense = config.part(saved.chunk_values_part()),
                                    .exact = true,
                                    .inputs = {v.name}},
                                   [&](int r) { return renamed(v.local(r), "kv"); });
}

// Phase 4 in allgather mode: NAME.k_all and NAME.v_all all-gathered, then each rank's queries
// against every key. From the second chunk on the chunk's keys and values are all-gathered as
// NAME.k_new, NAME.v_new and appended to the gathered cache (`cache_k`, `cache_v`, Replicate:
// sharded_read_cache) into NAME.k_all, NAME.v_all. Fills saved.k_all, v_all, lse and attn
// (Shard(seq) laid out as `rows`).
template <typename T>
void sharded_allgather_attention_forward(const World<T>& world, const CpAttentionConfig& config,
                                         const Layout& rows, const DistTensor<T>& cache_k,
                                         const DistTensor<T>& cache_v, CpShardedSaved<T>& saved) {
  auto gather = [&](const DistTensor<T>& shard, AttentionPart part, const DistTensor<T>& cache) {
    DistTensor<T> all = world.all_gather(
        shard, {.tensor = config.part(part), .exact = true, .inputs = {shard.name}});
    all.name = config.part(part);
    if (saved.cached == 0) return all;
    std::vector<Tensor<T>> joined(static_cast<std::size_t>(world.size()));
    world.for_each_rank([&](int r) {
      joined[static_cast<std::size_t>(r)] = concat_along(cache.local(r), all.local(r), "kv");
    });
    const AttentionPart whole =
        part == AttentionPart::k_new ? AttentionPart::k_all : AttentionPart::v_all;
    DistTensor<T> out =
        dist_from_locals(world, config.part(whole),
                         all.global.with_extent("kv", saved.cached + all.global.extent("kv")),
                         all.layout, std::move(joined));
    world.compare_boundary(
        {.op = "kv_cache", .tensor = out.name, .exact = true, .inputs = {cache.name, all.name}},
        out);
    return out;
  };
  saved.k_all = gather(saved.k_shard, saved.chunk_keys_part(), cache_k);
  saved.v_all = gather(saved.v_shard, saved.chunk_values_part(), cache_v);
  const Shape& chunk = saved.q_rot.global;
  const std::vector<std::int64_t> k_pos = saved.kv_positions();
  std::vector<Tensor<T>> out(static_cast<std::size_t>(world.size()));
  std::vector<Tensor<T>> lse(static_cast<std::size_t>(world.size()));
  world.for_each_rank([&](int r) {
    const auto at = static_cast<std::size_t>(r);
    AttentionSaved<T> core;
    attention_forward(saved.q_rot.local(r), saved.mask_positions[at], saved.k_all.local(r),
                      saved.v_all.local(r), k_pos, config.attention(), out[at], core);
    lse[at] = std::move(core.lse);
  });
  const std::vector<std::string> inputs{saved.q_rot.name, saved.k_all.name, saved.v_all.name};
  saved.lse = dist_from_locals(world, config.part(AttentionPart::lse), chunk.without("head_dim"),
                               rows, std::move(lse));
  world.compare_boundary(
      {.op = "attention", .tensor = saved.lse.name, .exact = true, .inputs = inputs}, saved.lse);
  saved.attn =
      dist_from_locals(world, config.part(AttentionPart::attn), chunk, rows, std::move(out));
  world.compare_boundary(
      {.op = "attention", .tensor = saved.attn.name, .exact = true, .inputs = inputs}, saved.attn);
}

// The allgather mode's attention backward: the block backward of every rank's queries against
// every key; each rank's contributions to every key and value (Partial on the cp dim) are
// reduce-scattered to their owners in the mesh's reduce order.
template <typename T>
ShardedCoreGrads<T> sharded_allgather_attention_backward(const World<T>& world,
                                                         const CpAttentionConfig& config,
                                                         const DistTensor<T>& dattn,
                                                         const CpShardedSaved<T>& saved) {
  const auto count = static_cast<std::size_t>(world.size());
  const std::vector<std::int64_t> k_pos = saved.kv_positions();
  std::vector<Tensor<T>> dq(count), dk(count), dv(count);
  world.for_each_rank([&](int r) {
    const auto at = static_cast<std::size_t>(r);
    dq[at] = Tensor<T>(saved.q_rot.local(r).shape());
    dk[at] = Tensor<T>(saved.k_all.local(r).shape());
    dv[at] = Tensor<T>(saved.v_all.local(r).shape());
    attention_block_backward(dattn.local(r), saved.q_rot.local(r), saved.mask_positions[at],
                             saved.k_all.local(r), saved.v_all.local(r), k_pos, saved.attn.local(r),
                             saved.lse.local(r), config.attention(), dq[at], dk[at], dv[at]);
  });
  const std::vector<std::string> inputs{dattn.name, saved.q_rot.name, saved.k_all.name,
                                        saved.v_all.name, saved.lse.name};
  ShardedCoreGrads<T> grads;
  grads.q_rot = dist_from_locals(world, grad_name(saved.q_rot.name), saved.q_rot.global,
                                 saved.q_rot.layout, std::move(dq));
  world.compare_boundary({.op = "attention_backward", .tensor = grads.q_rot.name, .inputs = inputs},
                         grads.q_rot);
  // The cache's keys are detached: only the chunk's keys (the last t) go back to their owners.
  const Shape& kv = saved.k_shard.global;
  const Layout partial = saved.k_all.layout.with(world.dim(), Placement::partial());
  const Placement owners = saved.k_shard.layout.on(world.dim());
  auto to_owners = [&](AttentionPart shard, AttentionPart all, std::vector<Tensor<T>> locals) {
    if (saved.cached > 0) {
      world.for_each_rank([&](int r) {
        Tensor<T>& whole = locals[static_cast<std::size_t>(r)];
        whole = slice_along(whole, "kv", saved.cached, kv.extent("kv"));
      });
    }
    const DistTensor<T> sums =
        dist_from_locals(world, config.part_grad(shard), kv, partial, std::move(locals));
    DistTensor<T> owned = world.reduce_scatter(
        sums, owners, {.tensor = sums.name, .dense = config.part_grad(all), .inputs = inputs});
    owned.name = sums.name;
    return owned;
  };
  grads.k = to_owners(AttentionPart::k_shard, saved.chunk_keys_part(), std::move(dk));
  grads.v = to_owners(AttentionPart::v_shard, saved.chunk_values_part(), std::move(dv));
  return grads;
}

// Phases 1 and 2: NAME.q, NAME.k, NAME.v on each rank's rows, and NAME.q_rot into saved.q_rot;
// returns the raw keys and values (k, v).
template <typename T>
std::pair<DistTensor<T>, DistTensor<T>> sharded_projections(
    const World<T>& world, const DistTensor<T>& x, const DistTensor<T>& wq, const DistTensor<T>& wk,
    const DistTensor<T>& wv, const CpAttentionConfig& config, CpShardedSaved<T>& saved) {
  const Shape chunk = head_shape(x.global.extent("batch"), "seq", x.global.extent("seq"),
                                 wq.global.extent("head"), wq.global.extent("head_dim"));
  auto project = [&](AttentionPart part, const DistTensor<T>& w) {
    return replicated_phase(world, config.part(part), chunk, x.layout,
                            {.op = "attention_project", .exact = true, .inputs = {x.name, w.name}},
                            [&](int r) {
                              Tensor<T> y;
                              project_heads(x.local(r), w.local(r), y);
                              return y;
                            });
  };
  const DistTensor<T> q = project(AttentionPart::q, wq);
  DistTensor<T> k = project(AttentionPart::k, wk);
  DistTensor<T> v = project(AttentionPart::v, wv);
  saved.q_rot =
      replicated_phase(world, config.part(AttentionPart::q_rot), chunk, x.layout,
                       {.op = "rope", .exact = true, .inputs = {q.name}}, [&](int r) {
                         Tensor<T> y;
                         rope_forward(q.local(r), saved.positions[static_cast<std::size_t>(r)],
                                      config.rope("seq"), y);
                         return y;
                       });
  return {std::move(k), std::move(v)};
}

// Every rank's token positions (absolute: the chunk starts at saved.first), the query positions
// its mask reads, and every cp coordinate's KV block positions: its cached tokens' (`cached`,
// per coordinate; empty without a cache), then its chunk tokens'.
template <typename T>
void sharded_positions(const World<T>& world, const DistTensor<T>& x,
                       const CpAttentionConfig& config,
                       const std::vector<std::vector<std::int64_t>>& cached,
                       CpShardedSaved<T>& saved) {
  const auto count = static_cast<std::size_t>(world.size());
  saved.positions.assign(count, {});
  saved.mask_positions.assign(count, {});
  world.for_each_rank([&](int r) {
    const Slice share = x.slice(r, "seq");
    const auto at = static_cast<std::size_t>(r);
    saved.positions[at] = share_positions(share, saved.first);
    saved.mask_positions[at] = mask_query_positions(config.faults, share, saved.first);
  });
  const Placement& on_cp = x.layout.on(world.dim());
  saved.coord_positions.clear();
  for (const Slice& share : shard_slices(x.global.extent("seq"), world.group_size(), on_cp.split)) {
    const std::size_t coord = saved.coord_positions.size();
    std::vector<std::int64_t> block =
        coord < cached.size() ? cached[coord] : std::vector<std::int64_t>{};
    const std::vector<std::int64_t> own = share_positions(share, saved.first);
    block.insert(block.end(), own.begin(), own.end());
    saved.coord_positions.push_back(std::move(block));
  }
}

}  // namespace detail

// One chunk (the whole sequence without [stream]). Reads and writes `cache` (attention/
// sharded_cache.hpp); fills `saved` for cp_sharded_attention_backward; returns NAME, placed like x.
// REQUIRES: x is Shard(seq) (chunk, balanced or zigzag) on the world's dim, and seq is sharded
// on no other dim; weights Replicate there.
template <typename T>
DistTensor<T> cp_sharded_attention_forward(const World<T>& world, const DistTensor<T>& x,
                                           const DistTensor<T>& wq, const DistTensor<T>& wk,
                                           const DistTensor<T>& wv, const DistTensor<T>& wo,
                                           const CpAttentionConfig& config,
                                           CpShardedCache<T>& cache, CpShardedSaved<T>& saved) {
  const Layout& rows = x.layout;
  saved.param_grad = row_sum_grad_layout(rows, rows);
  saved.first = cache.next_position;
  saved.cached = cache.length;
  detail::sharded_positions(world, x, config, cache.coord_positions, saved);
  const auto [k, v] = detail::sharded_projections(world, x, wq, wk, wv, config, saved);
  sharded_cache_begin(world, config, k, cache);
  DistTensor<T> cache_k, cache_v;  // allgather: the cache gathered, Replicate
  sharded_read_cache(world, config, cache, saved, cache_k, cache_v);
  detail::sharded_keys_values(world, config, k, v, saved);
  switch (config.mode) {
    case CpMode::allgather:
      sharded_kv_blocks(world, cache, saved);
      detail::sharded_allgather_attention_forward(world, config, rows, cache_k, cache_v, saved);
      break;
    case CpMode::ring:
      sharded_kv_blocks(world, cache, saved);
      sharded_ring_attention_forward(world, config, rows, saved);
      break;
    case CpMode::ulysses:
      sharded_ulysses_attention_forward(world, config, rows, cache, saved);
      break;
  }
  sharded_write_cache(world, config, k, saved, cache);
  return replicated_phase(world, config.name, x.global, rows,
                          {.op = op_label(OpKind::sliding_window_attention),
                           .exact = true,
                           .inputs = {saved.attn.name, wo.name}},
                          [&](int r) {
                            Tensor<T> y;
                            project_out(saved.attn.local(r), wo.local(r), y);
                            return y;
                          });
}

namespace detail {

// The mode's attention backward from grad(NAME.attn) (Shard(seq)).
template <typename T>
ShardedCoreGrads<T> sharded_attention_backward(const World<T>& world,
                                               const CpAttentionConfig& config,
                                               const DistTensor<T>& dattn,
                                               const CpShardedSaved<T>& saved) {
  switch (config.mode) {
    case CpMode::ring:
      return sharded_ring_attention_backward(world, config, dattn, saved);
    case CpMode::ulysses:
      return sharded_ulysses_attention_backward(world, config, dattn, saved);
    case CpMode::allgather:
      break;
  }
  return sharded_allgather_attention_backward(world, config, dattn, saved);
}

}  // namespace detail

// From grad(NAME) held like x (Shard(seq) on the cp dim).
template <typename T>
CpAttentionGrads<T> cp_sharded_attention_backward(const World<T>& world, const DistTensor<T>& dy,
                                                  const DistTensor<T>& x, const DistTensor<T>& wq,
                                                  const DistTensor<T>& wk, const DistTensor<T>& wv,
                                                  const DistTensor<T>& wo,
                                                  const CpAttentionConfig& config,
                                                  const CpShardedSaved<T>& saved) {
  const Layout& rows = x.layout;
  const auto count = static_cast<std::size_t>(world.size());
  const Shape& chunk = saved.attn.global;
  CpAttentionGrads<T> grads;
  // grad(NAME.attn) and each rank's share of grad(wo), over its own rows.
  std::vector<Tensor<T>> dattn(count), dwo(count);
  world.for_each_rank([&](int r) {
    const auto at = static_cast<std::size_t>(r);
    dwo[at] = Tensor<T>(wo.global);
    project_out_backward(dy.local(r), saved.attn.local(r), wo.local(r), dattn[at], dwo[at]);
  });
  DistTensor<T> dattn_rows =
      dist_from_locals(world, grad_name(saved.attn.name), chunk, rows, std::move(dattn));
  world.compare_boundary({.op = backward_label(OpKind::sliding_window_attention),
                          .tensor = dattn_rows.name,
                          .exact = true,
                          .inputs = {dy.name, wo.name}},
                         dattn_rows);
  grads.wo =
      dist_from_locals(world, grad_name(wo.name), wo.global, saved.param_grad, std::move(dwo));
  const ShardedCoreGrads<T> core =
      detail::sharded_attention_backward(world, config, dattn_rows, saved);
  auto position = [&](int r) -> const std::vector<std::int64_t>& {
    return saved.positions[static_cast<std::size_t>(r)];
  };
  const DistTensor<T> dq_raw =
      replicated_phase(world, config.part_grad(AttentionPart::q), chunk, rows,
                       {.op = "rope_backward", .inputs = {core.q_rot.name}}, [&](int r) {
                         Tensor<T> y;
                         rope_backward(core.q_rot.local(r), position(r), config.rope("seq"), y);
                         return y;
                       });
  const DistTensor<T> dk_raw = replicated_phase(
      world, config.part_grad(AttentionPart::k), chunk, rows,
      {.op = "rope_backward", .inputs = {core.k.name}}, [&](int r) {
        Tensor<T> y;
        rope_backward(detail::renamed(core.k.local(r), "seq"), position(r), config.rope("seq"), y);
        return y;
      });
  const DistTensor<T> dv_raw =
      replicated_phase(world, config.part_grad(AttentionPart::v), chunk, rows,
                       {.op = "kv_shard_backward", .inputs = {core.v.name}},
                       [&](int r) { return detail::renamed(core.v.local(r), "seq"); });
  ChunkGeometry geo;
  geo.param_grad = saved.param_grad;
  detail::cp_input_projection_backward(world, x, wq, wk, wv, dq_raw, dk_raw, dv_raw, geo, grads);
  return grads;
}

}  // namespace shardsim
