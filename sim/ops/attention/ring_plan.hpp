// cp_mode = "ring" (ring attention, Liu et al. 2023): each rank keeps its KV shard and owns a
// torch.chunk slice of the queries; the KV shards travel around the ring by send/recv.
//
// Hop h = 0 .. k-1: rank r holds the KV block of rank (r - h) mod k (sends to r + 1, receives
// from r - 1), computes its queries' partial result against that block (attention_forward of
// attention/attention.hpp: out and lse over the block's keys) and merges it into its running
// (out, lse) with the log-sum-exp formula of attention_merge. Merge order on rank r: blocks r,
// r-1, ..., r-k+1 (mod k), i.e. arrival order. A block the window masks out entirely has
// lse = -inf and merges as a no-op (no NaN). The running result starts at (0, -inf), so the
// first block is taken bit for bit; the merges reorder the dense arithmetic, so the result is
// compared within tolerance.
//
// Forward boundaries: NAME.q_shard (Replicate -> Shard(seq)), NAME.lse and NAME.attn_shard
// (Shard(seq)), NAME.attn (all_gather -> Replicate). Every block passes through every rank, so
// each rank copies the cache positions out of the blocks as they pass: the cache written back is
// Replicate with no extra collective.
// Backward: the same ring again. From the merged (out, lse), each block contributes
// (attention_block_backward) to its rank's dq (accumulated in arrival order) and to a full-length
// Partial dK/dV; the Partial sums are reduce-scattered to the block owners (Shard(kv)) in the
// mesh's reduce order.
#pragma once

#include "ops/attention/plan_common.hpp"

namespace shardsim {

namespace detail {

// The coordinate whose block the member at coordinate c holds at hop h, in a group of k.
inline int ring_owner(int coord, int hop, int k) { return ((coord - hop) % k + k) % k; }

// Copies the cache positions [tail_begin, L + t) of the KV axis that fall in `block` out of the
// block's keys and values (batch, kv=block, head, head_dim) into this rank's cache tensors
// (batch, kv=C, head, head_dim), C = L + t - tail_begin.
template <typename T>
void ring_copy_cache_tail(const Tensor<T>& k_block, const Tensor<T>& v_block, const Slice& block,
                          std::int64_t tail_begin, Tensor<T>& cache_k, Tensor<T>& cache_v) {
  const std::int64_t from = std::max(block.begin, tail_begin);  // first cached position in block
  if (from >= block.end) return;
  copy_along(k_block, "kv", from - block.begin, cache_k, from - tail_begin, block.end - from);
  copy_along(v_block, "kv", from - block.begin, cache_v, from - tail_begin, block.end - from);
}

// The merge of the ring_merge_* faults (AttentionFaults), in place of attention_merge:
//   no_max:  w_running = exp(lse_running), w_block = exp(lse_block), lse = log(w_running +
//            w_block), without subtracting the larger lse first: exp overflows to inf once a
//            log-sum-exp passes the format's range (about 88.7 in f32), and out becomes NaN;
//   average: out = (out * n + block_out) / (n + 1) over the n blocks merged so far (`merged`,
//            one count per row), ignoring the blocks' weights; lse is merged correctly.
// A fully masked block (lse = -inf) is a no-op in both, as in the correct merge.
template <typename T>
void ring_merge_faulty(const AttentionFaults& faults, Tensor<T>& out, Tensor<T>& lse,
                       std::vector<int>& merged, const Tensor<T>& block_out,
                       const Tensor<T>& block_lse) {
  using std::exp;
  using std::isinf;
  using std::log;
  const AxisView rows{1, lse.numel(), 1};
  const std::int64_t dim = out.numel() / std::max<std::int64_t>(1, lse.numel());
  merged.resize(static_cast<std::size_t>(lse.numel()), 0);
  for (std::int64_t row = 0; row < rows.extent; ++row) {
    const T lse_block = block_lse[row];
    if (isinf(lse_block) && lse_block < T(0)) continue;
    int& n = merged[static_cast<std::size_t>(row)];
    const T lse_running = lse[row];
    const bool first = n == 0;
    for (std::int64_t d = 0; d < dim; ++d) {
      const std::int64_t at = row * dim + d;
      if (first) {
        out[at] = block_out[at];
      } else if (faults.ring_merge_average) {
        out[at] = (out[at] * T(n) + block_out[at]) / T(n + 1);
      } else {
        const T w_running = exp(lse_running);
        const T w_block = exp(lse_block);
        out[at] = (out[at] * w_running + block_out[at] * w_block) / (w_running + w_block);
      }
    }
    if (first) {
      lse[row] = lse_block;
    } else if (faults.ring_merge_average) {
      const T m = lse_running > lse_block ? lse_running : lse_block;
      lse[row] = m + log(exp(lse_running - m) + exp(lse_block - m));
    } else {
      lse[row] = log(exp(lse_running) + exp(lse_block));
    }
    ++n;
  }
}

// The lse a block's backward normalizes its probabilities with, exp(s - lse): the merged lse;
// with the ring_backward_local_lse fault, the block's own (recomputed from the block alone).
template <typename T>
Tensor<T> ring_backward_lse(const CpAttentionConfig& config, const Tensor<T>& q,
                            const std::vector<std::int64_t>& q_pos, const Tensor<T>& k_block,
                            const Tensor<T>& v_block, const std::vector<std::int64_t>& k_pos,
                            const Tensor<T>& merged) {
  if (!config.faults.ring_backward_local_lse) return merged;
  Tensor<T> block_out;
  AttentionSaved<T> block_saved;
  attention_forward(q, q_pos, k_block, v_block, k_pos, config.attention(), block_out, block_saved);
  return std::move(block_saved.lse);
}

// Merges one block's (out, lse) into a rank's running result: attention_merge, or under a
// ring_merge_* fault ring_merge_faulty (`merged` counts its blocks per row).
template <typename T>
void ring_merge(const AttentionFaults& faults, Tensor<T>& out, Tensor<T>& lse,
                std::vector<int>& merged, const Tensor<T>& block_out, const Tensor<T>& block_lse) {
  if (faults.ring_merge_no_max || faults.ring_merge_average) {
    ring_merge_faulty(faults, out, lse, merged, block_out, block_lse);
  } else {
    attention_merge(out, lse, block_out, block_lse);
  }
}

}  // namespace detail

// Phase 6 forward in ring mode: returns NAME.attn (batch, seq=t, head, head_dim), Replicate;
// fills saved.q_part, saved.lse, saved.attn_part; writes the cache back, Replicate.
template <typename T>
DistTensor<T> ring_attention_forward(const World<T>& world, const CpAttentionConfig& config,
                                     const ChunkGeometry& geo, CpAttentionSaved<T>& saved,
                                     CpKvCache<T>& cache) {
  const int k = world.group_size();
  const auto count = static_cast<std::size_t>(world.size());
  saved.q_part = world.redistribute(saved.q_rot, Placement::shard("seq"),
                                    {.tensor = config.part(AttentionPart::q_shard),
                                     .dense = saved.q_rot.name,
                                     .exact = true,
                                     .inputs = {saved.q_rot.name}});
  saved.q_part.name = config.part(AttentionPart::q_shard);
  const std::vector<Slice> q_slices = shard_slices(geo.length, k, SplitPolicy::chunk);
  // Per rank: the running merge, out (batch, seq=slice, head, head_dim) and lse (batch,
  // seq=slice, head); the cache being written back (batch, kv=C, head, head_dim); and the KV
  // block held at the current hop (batch, kv=block, head, head_dim).
  std::vector<Tensor<T>> out(count), lse(count), cache_k(count), cache_v(count);
  std::vector<std::vector<int>> merged(count);  // ring_merge_faulty's per-row block counts
  std::vector<Tensor<T>> k_blocks = saved.k_shard.locals;
  std::vector<Tensor<T>> v_blocks = saved.v_shard.locals;
  const std::int64_t tail_begin = geo.cached + geo.length - geo.keep;
  world.for_each_rank([&](int r) {
    const auto at = static_cast<std::size_t>(r);
    out[at] = Tensor<T>(saved.q_part.local(r).shape());
    lse[at] = Tensor<T>(saved.q_part.local(r).shape().without("head_dim"));
    for (T& value : lse[at].values()) value = negative_infinity<T>();
    // (batch=local, kv=C, head, head_dim): every key of the cache, the rank's own batch rows.
    const Shape cache =
        local_shape(geo.cache_shape(), geo.on(Placement::replicate()), world.mesh(), r);
    cache_k[at] = Tensor<T>(cache);
    cache_v[at] = Tensor<T>(cache);
  });
  for (int hop = 0; hop < k; ++hop) {
    world.for_each_rank([&](int r) {
      const auto at = static_cast<std::size_t>(r);
      const int coord = world.coord(r);
      const Slice& block =
          geo.kv_slices[static_cast<std::size_t>(detail::ring_owner(coord, hop, k))];
      const Slice& queries = q_slices[static_cast<std::size_t>(coord)];
      Tensor<T> block_out;  // (batch, seq=slice, head, head_dim)
      AttentionSaved<T> block_saved;
      attention_forward(saved.q_part.local(r),
                        position_range(geo.first + queries.begin, queries.valid()), k_blocks[at],
                        v_blocks[at], kv_positions(geo.first, geo.cached, block),
                        config.attention(), block_out, block_saved);
      detail::ring_merge(config.faults, out[at], lse[at], merged[at], block_out, block_saved.lse);
      detail::ring_copy_cache_tail(k_blocks[at], v_blocks[at], block, tail_begin, cache_k[at],
                                   cache_v[at]);
    });
    if (hop + 1 < k) {
      k_blocks = world.ring_send_recv(k_blocks);
      v_blocks = world.ring_send_recv(v_blocks);
    }
  }
  const std::vector<std::string> inputs{saved.q_part.name, saved.k_shard.name, saved.v_shard.name};
  saved.lse = dist_from_locals(world, config.part(AttentionPart::lse), geo.row_shape(),
                               geo.on(Placement::shard("seq")), lse);
  world.compare_boundary({.op = "ring_attention", .tensor = saved.lse.name, .inputs = inputs},
                         saved.lse);
  saved.attn_part = dist_from_locals(world, config.part(AttentionPart::attn_shard),
                                     geo.chunk_shape(), geo.on(Placement::shard("seq")), out);
  world.compare_boundary({.op = "ring_attention",
                          .tensor = saved.attn_part.name,
                          .dense = config.part(AttentionPart::attn),
                          .inputs = inputs},
                         saved.attn_part);
  DistTensor<T> attn =
      world.all_gather(saved.attn_part, {.tensor = config.part(AttentionPart::attn),
                                         .exact = true,
                                         .inputs = {saved.attn_part.name}});
  attn.name = config.part(AttentionPart::attn);
  cache.k = dist_from_locals(world, cache.k.name, geo.cache_shape(), geo.on(Placement::replicate()),
                             cache_k);
  cache.v = dist_from_locals(world, cache.v.name, geo.cache_shape(), geo.on(Placement::replicate()),
                             cache_v);
  return attn;
}

// Phase 6 backward in ring mode, from grad(NAME.attn) (Replicate).
template <typename T>
CoreGrads<T> ring_attention_backward(const World<T>& world, const CpAttentionConfig& config,
                                     const ChunkGeometry& geo, const DistTensor<T>& dattn,
                                     const CpAttentionSaved<T>& saved) {
  const int k = world.group_size();
  const auto count = static_cast<std::size_t>(world.size());
  const std::string dattn_shard_name = grad_name(saved.attn_part.name);
  const DistTensor<T> dattn_shard = world.redistribute(
      dattn, Placement::shard("seq"),
      {.tensor = dattn_shard_name, .dense = dattn.name, .exact = true, .inputs = {dattn.name}});
  const std::vector<Slice> q_slices = shard_slices(geo.length, k, SplitPolicy::chunk);
  // Per rank: dq of its queries (batch, seq=slice, head, head_dim), accumulated over the hops;
  // its contributions to dK and dV over the whole KV axis (batch, kv=L+t, head, head_dim), each
  // block's part written once; the KV block held at the current hop.
  std::vector<Tensor<T>> dq(count), dk(count), dv(count);
  std::vector<Tensor<T>> k_blocks = saved.k_shard.locals;
  std::vector<Tensor<T>> v_blocks = saved.v_shard.locals;
  world.for_each_rank([&](int r) {
    const auto at = static_cast<std::size_t>(r);
    dq[at] = Tensor<T>(saved.q_part.local(r).shape());
    const Shape kv = local_shape(geo.kv_shape(), geo.on(Placement::replicate()), world.mesh(), r);
    dk[at] = Tensor<T>(kv);
    dv[at] = Tensor<T>(kv);
  });
  for (int hop = 0; hop < k; ++hop) {
    world.for_each_rank([&](int r) {
      const auto at = static_cast<std::size_t>(r);
      const int coord = world.coord(r);
      const Slice& block =
          geo.kv_slices[static_cast<std::size_t>(detail::ring_owner(coord, hop, k))];
      const Slice& queries = q_slices[static_cast<std::size_t>(coord)];
      Tensor<T> dk_block(k_blocks[at].shape());  // (batch, kv=block, head, head_dim)
      Tensor<T> dv_block(v_blocks[at].shape());
      const std::vector<std::int64_t> q_pos =
          position_range(geo.first + queries.begin, queries.valid());
      const std::vector<std::int64_t> k_pos = kv_positions(geo.first, geo.cached, block);
      const Tensor<T> lse = detail::ring_backward_lse(config, saved.q_part.local(r), q_pos,
                                                      k_blocks[at], v_blocks[at], k_pos,
                                                      saved.lse.local(r));
      attention_block_backward(dattn_shard.local(r), saved.q_part.local(r), q_pos, k_blocks[at],
                               v_blocks[at], k_pos, saved.attn_part.local(r), lse,
                               config.attention(), dq[at], dk_block, dv_block);
      copy_along(dk_block, "kv", 0, dk[at], block.begin, block.valid());
      copy_along(dv_block, "kv", 0, dv[at], block.begin, block.valid());
    });
    if (hop + 1 < k) {
      k_blocks = world.ring_send_recv(k_blocks);
      v_blocks = world.ring_send_recv(v_blocks);
    }
  }
  const std::vector<std::string> inputs{dattn_shard_name,     saved.q_part.name,
                                        saved.k_shard.name,   saved.v_shard.name,
                                        saved.attn_part.name, saved.lse.name};
  const std::string dq_name = grad_name(saved.q_part.name);
  DistTensor<T> dq_part =
      dist_from_locals(world, dq_name, geo.chunk_shape(), geo.on(Placement::shard("seq")), dq);
  world.compare_boundary({.op = "ring_attention_backward",
                          .tensor = dq_name,
                          .dense = config.part_grad(AttentionPart::q_rot),
                          .inputs = inputs},
                         dq_part);
  CoreGrads<T> grads;
  grads.q_rot = world.all_gather(
      dq_part,
      {.tensor = config.part_grad(AttentionPart::q_rot), .exact = true, .inputs = {dq_name}});
  grads.q_rot.name = config.part_grad(AttentionPart::q_rot);
  // Each rank's contributions to every block, summed at the block owners.
  const DistTensor<T> dk_partial =
      dist_from_locals(world, config.part_grad(AttentionPart::k_shard), geo.kv_shape(),
                       geo.on(Placement::partial()), dk);
  const DistTensor<T> dv_partial =
      dist_from_locals(world, config.part_grad(AttentionPart::v_shard), geo.kv_shape(),
                       geo.on(Placement::partial()), dv);
  grads.k = world.reduce_scatter(dk_partial, Placement::shard("kv"),
                                 {.tensor = dk_partial.name,
                                  .dense = config.part_grad(AttentionPart::k_all),
                                  .inputs = inputs});
  grads.v = world.reduce_scatter(dv_partial, Placement::shard("kv"),
                                 {.tensor = dv_partial.name,
                                  .dense = config.part_grad(AttentionPart::v_all),
                                  .inputs = inputs});
  return grads;
}

}  // namespace shardsim
