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
//   6. the mode (attention/allgather_plan.hpp, ring_plan.hpp, ulysses_plan.hpp) -> NAME.attn,
//      Replicate, and the cache written back (K after RoPE, C = min(window - 1, L + t) keys)
//   7. NAME                        attn wo on every rank, Replicate
// Backward (the cache is detached; see attention/stream.hpp): grad(NAME.attn) on every rank, the
// mode's backward, then grad(NAME.q) (inverse RoPE, every rank), grad(NAME.k_cat_shard) (inverse
// RoPE of each shard's chunk keys), grad(NAME.k_cat) and grad(NAME.v_all) (all_gather), and
// grad(NAME.k), grad(NAME.v) (the chunk part); the projections' gradients are Replicate.
//
// This header gathers the plan: forward in attention/plan_forward.hpp, backward in
// attention/plan_backward.hpp, the per-mode phases in attention/{allgather,ring,ulysses}_plan.hpp,
// their shared vocabulary in attention/plan_common.hpp and the boundary names in
// attention/parts.hpp.
#pragma once

#include "ops/attention/plan_backward.hpp"
#include "ops/attention/plan_common.hpp"
#include "ops/attention/plan_forward.hpp"
