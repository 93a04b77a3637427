// Context-parallel GQA attention: the input x is Shard(seq) on a cp dim (split chunk, balanced
// or zigzag), and the heads are split over the step's dim as in gqa_plan.hpp (or Replicate
// there; the cp dim may then be the step's dim itself). Every rank owns its tokens end to end,
// at their global positions; only keys and values move between the cp ranks.
//
// Forward, per rank (its query heads and the kv heads they read, its tokens):
//   1. NAME.q, NAME.k, NAME.v = x wq, x wk, x wv on its rows; NAME.q_rot, NAME.k_rot RoPE'd at
//      the tokens' global positions: Shard(seq) on cp, exact (the oracle's rows, bit for bit);
//   2. the mode's attention (causal on global positions) -> NAME.attn, Shard(seq):
//        allgather  NAME.k_all, NAME.v_all: the rotated keys and values all-gathered over cp
//                   (Replicate, exact); each rank's queries against every key in ascending
//                   position order: the oracle's rows, exact (Llama 3's all-gather CP);
//        ring       the KV blocks (own rotated keys and values, kv heads unexpanded) travel the
//                   cp group by send/recv; hop h = 0 .. k-1, the member at coordinate c holds the
//                   block of coordinate (c - h) mod k, computes its queries against it and merges
//                   by log-sum-exp (attention_merge) in that arrival order: within tolerance;
//   3. NAME = attn wo: Partial(sum) over the heads' dim when the heads are split, else exact
//      in allgather mode.
// Backward: grad(y) moved to Replicate on the heads' dim, Shard(seq) on cp. dattn and dwo on each
// rank's rows; then
//   allgather  each rank's queries' backward against every key (attention_backward from its
//              softmax) gives grad(NAME.q_rot) (exact) and its queries' share of every key's
//              gradient; per kv head the group's query heads are summed (ascending), and the
//              Partial grad(NAME.k_rot), grad(NAME.v) are reduce-scattered over cp to the keys'
//              owners (the mesh's reduce order);
//   ring       the blocks travel the ring again, each with its dK/dV accumulators (kv heads): at
//              every hop the member adds its queries' share (attention_block_backward from the
//              merged out and lse, query heads summed per kv head, then added); the k-th
//              send/recv brings each accumulator home. Sum order of coordinate o's keys: the
//              queries of coordinates o, o+1, ..., o+k-1 (mod k); dq sums its blocks in arrival
//              order;
// then RoPE's inverse at the owners' positions and the input projections: grad(x) Shard(seq)
// (Partial over the heads' dim when split), the weights' gradients Partial on cp (and every dim
// that splits the rows), as gqa_plan.hpp says for the heads' dim.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "ops/attention/plan_common.hpp"
#include "ops/attention/ring_plan.hpp"
#include "ops/gqa_attention/gqa_plan.hpp"
#include "ops/gqa_attention/gqa_ulysses_plan.hpp"

namespace shardsim {

enum class GqaCpMode { allgather, ring, ulysses };

// What the forward keeps for backward, per mesh rank.
template <typename T>
struct GqaCpSaved {
  std::vector<std::vector<std::int64_t>> positions;  // its tokens' global positions
  std::vector<GqaParams> params;                     // its heads (gqa_rank_params)
  std::vector<Tensor<T>> q_rot, k_rot, v;            // its rows
  std::vector<Tensor<T>> k_all, v_all;               // allgather: every position's
  std::vector<AttentionSaved<T>> core;               // allgather: its queries' softmax
  std::vector<Tensor<T>> attn, lse;                  // ring: the merged results
  GqaUlyssesSaved<T> ulysses;                        // ulysses: the head groups
};

namespace gqa_cp {

// The mesh dim on which `x` is Shard(seq), or -1.
template <typename T>
int sequence_dim(const DistTensor<T>& x) {
  for (int d = 0; d < x.layout.ndim(); ++d) {
    if (x.layout.on(d).is_shard() && x.layout.on(d).axis == "seq") return d;
  }
  return -1;
}

// Assembles per-rank locals into NAME.PART (grad(NAME.PART) in backward) and records it against
// the oracle's tensor.
template <typename T>
DistTensor<T> record(const World<T>& world, const std::string& name, const Shape& shape,
                     const Layout& layout, std::vector<Tensor<T>> locals, bool exact,
                     std::vector<std::string> inputs, bool backward = false) {
  DistTensor<T> t = dist_from_locals(world, name, shape, layout, std::move(locals));
  world.compare_boundary(
      {.op = backward ? backward_label(OpKind::gqa_attention) : op_label(OpKind::gqa_attention),
       .tensor = name,
       .exact = exact,
       .inputs = std::move(inputs)},
      t);
  return t;
}

// The ring forward: fills saved.attn and saved.lse from the rows.
template <typename T>
void ring_forward(const World<T>& cp, GqaCpSaved<T>& saved) {
  const int k = cp.group_size();
  std::vector<Tensor<T>> k_blocks = saved.k_rot;
  std::vector<Tensor<T>> v_blocks = saved.v;
  cp.for_each_rank([&](int r) {
    const auto at = static_cast<std::size_t>(r);
    saved.attn[at] = Tensor<T>(saved.q_rot[at].shape());
    saved.lse[at] = Tensor<T>(saved.q_rot[at].shape().without("head_dim"));
    for (T& value : saved.lse[at].values()) value = negative_infinity<T>();
  });
  for (int hop = 0; hop < k; ++hop) {
    cp.for_each_rank([&](int r) {
      const auto at = static_cast<std::size_t>(r);
      const int owner = cp.peer(r, detail::ring_owner(cp.coord(r), hop, k));
      Tensor<T> block_out;
      AttentionSaved<T> block_saved;
      gqa_attend(saved.q_rot[at], saved.positions[at], k_blocks[at], v_blocks[at],
                 saved.positions[static_cast<std::size_t>(owner)], saved.params[at], block_out,
                 block_saved);
      attention_merge(saved.attn[at], saved.lse[at], block_out, block_saved.lse);
    });
    if (hop + 1 < k) {
      k_blocks = cp.ring_send_recv(k_blocks);
      v_blocks = cp.ring_send_recv(v_blocks);
    }
  }
}

// The ring backward: grad(q_rot) per rank, and each owner's dK/dV of its rows.
template <typename T>
void ring_backward(const World<T>& cp, const DistTensor<T>& dattn, const GqaCpSaved<T>& saved,
                   std::vector<Tensor<T>>& dq, std::vector<Tensor<T>>& dk,
                   std::vector<Tensor<T>>& dv) {
  const int k = cp.group_size();
  std::vector<Tensor<T>> k_blocks = saved.k_rot;
  std::vector<Tensor<T>> v_blocks = saved.v;
  cp.for_each_rank([&](int r) {
    const auto at = static_cast<std::size_t>(r);
    dq[at] = Tensor<T>(saved.q_rot[at].shape());
    dk[at] = Tensor<T>(k_blocks[at].shape());
    dv[at] = Tensor<T>(v_blocks[at].shape());
  });
  for (int hop = 0; hop < k; ++hop) {
    cp.for_each_rank([&](int r) {
      const auto at = static_cast<std::size_t>(r);
      const int owner = cp.peer(r, detail::ring_owner(cp.coord(r), hop, k));
      gqa_attend_block_backward(dattn.local(r), saved.q_rot[at], saved.positions[at], k_blocks[at],
                                v_blocks[at], saved.positions[static_cast<std::size_t>(owner)],
                                saved.attn[at], saved.lse[at], saved.params[at], dq[at], dk[at],
                                dv[at]);
    });
    if (hop + 1 < k) {
      k_blocks = cp.ring_send_recv(k_blocks);
      v_blocks = cp.ring_send_recv(v_blocks);
    }
    dk = cp.ring_send_recv(dk);  // the accumulators follow their blocks; the k-th goes home
    dv = cp.ring_send_recv(dv);
  }
}

// Step 1 of the forward: each rank's rows (saved.q_rot, k_rot, v; its positions and heads),
// recorded as NAME.q, .k, .v, .q_rot, .k_rot. Returns q_rot, k_rot and v.
template <typename T>
std::array<DistTensor<T>, 3> rows_forward(const World<T>& world, const DistTensor<T>& x,
                                          const DistTensor<T>& wq, const DistTensor<T>& wk,
                                          const DistTensor<T>& wv, const GqaParams& params,
                                          const std::string& output, GqaCpSaved<T>& saved) {
  const int dim = world.dim();
  const auto count = static_cast<std::size_t>(x.ranks());
  saved = GqaCpSaved<T>();
  for (auto* v : {&saved.q_rot, &saved.k_rot, &saved.v, &saved.k_all, &saved.v_all, &saved.attn,
                  &saved.lse}) {
    v->resize(count);
  }
  saved.core.resize(count);
  std::vector<Tensor<T>> q(count), k(count);
  for (int r = 0; r < x.ranks(); ++r) {
    saved.positions.push_back(slice_positions(x.slice(r, "seq")));
    saved.params.push_back(gqa_rank_params(world, wq, wk, params, r));
  }
  world.for_each_rank([&](int r) {
    const auto at = static_cast<std::size_t>(r);
    GqaRows<T> rows;
    gqa_rows_forward(x.local(r), wq.local(r), wk.local(r), wv.local(r), saved.params[at],
                     saved.positions[at], rows);
    q[at] = std::move(rows.q);
    k[at] = std::move(rows.k);
    saved.v[at] = std::move(rows.v);
    saved.q_rot[at] = std::move(rows.q_rot);
    saved.k_rot[at] = std::move(rows.k_rot);
  });
  const Shape& xs = x.global;
  const std::int64_t hd = wq.global.extent("head_dim");
  const Shape q_shape({xs[0], xs[1], {"head", params.n_head}, {"head_dim", hd}});
  const Shape kv_shape({xs[0], xs[1], {"kv_head", params.n_kv_head}, {"head_dim", hd}});
  const Layout q_layout = x.layout.with(dim, world.placement(wq));
  const Layout kv_layout = x.layout.with(dim, world.placement(wk));
  const auto part = [&](const char* p) { return part_name(output, p); };
  record(world, part("q"), q_shape, q_layout, std::move(q), true, {x.name, wq.name});
  record(world, part("k"), kv_shape, kv_layout, std::move(k), true, {x.name, wk.name});
  DistTensor<T> v = record(world, part("v"), kv_shape, kv_layout, saved.v, true, {x.name, wv.name});
  DistTensor<T> q_rot =
      record(world, part("q_rot"), q_shape, q_layout, saved.q_rot, true, {part("q")});
  DistTensor<T> k_rot =
      record(world, part("k_rot"), kv_shape, kv_layout, saved.k_rot, true, {part("k")});
  return {std::move(q_rot), std::move(k_rot), std::move(v)};
}

}  // namespace gqa_cp

// The forward above; `world` is bound to the heads' dim. Records NAME.q, .k, .v, .q_rot, .k_rot,
// (allgather) .k_all, .v_all, then .attn and NAME.
template <typename T>
DistTensor<T> gqa_cp_sharded(const World<T>& world, int cp_dim, GqaCpMode mode,
                             const DistTensor<T>& x, const DistTensor<T>& wq,
                             const DistTensor<T>& wk, const DistTensor<T>& wv,
                             const DistTensor<T>& wo, const GqaParams& params,
                             const std::string& output, GqaCpSaved<T>& saved) {
  const World<T> cp = world.on(cp_dim);
  const int dim = world.dim();
  const bool heads = world.placement(wq).is_shard();
  const auto count = static_cast<std::size_t>(x.ranks());
  const auto [q_rot, k_rot, v] = gqa_cp::rows_forward(world, x, wq, wk, wv, params, output, saved);
  const Shape& xs = x.global;
  const auto part = [&](const char* p) { return part_name(output, p); };
  const std::vector<std::int64_t> all = position_range(0, xs.extent("seq"));
  if (mode == GqaCpMode::allgather) {
    const DistTensor<T> k_all = cp.all_gather(k_rot, {.tensor = part("k_all"),
                                                      .dense = part("k_rot"),
                                                      .exact = true,
                                                      .inputs = {part("k_rot")}});
    const DistTensor<T> v_all = cp.all_gather(
        v, {.tensor = part("v_all"), .dense = part("v"), .exact = true, .inputs = {part("v")}});
    world.for_each_rank([&](int r) {
      const auto at = static_cast<std::size_t>(r);
      saved.k_all[at] = k_all.local(r);
      saved.v_all[at] = v_all.local(r);
      gqa_attend(saved.q_rot[at], saved.positions[at], saved.k_all[at], saved.v_all[at], all,
                 saved.params[at], saved.attn[at], saved.core[at]);
    });
  } else if (mode == GqaCpMode::ring) {
    gqa_cp::ring_forward(cp, saved);
  } else {
    const DistTensor<T> attn = gqa_ulysses_forward(
        cp, q_rot, k_rot, v, saved.params,
        gqa_ulysses_kv_to_heads(world, cp.group_size(), wq, wk, params), output, saved.ulysses);
    world.for_each_rank([&](int r) { saved.attn[static_cast<std::size_t>(r)] = attn.local(r); });
  }
  const bool exact = mode != GqaCpMode::ring;
  if (mode != GqaCpMode::ulysses) {  // ulysses' all-to-all back recorded it
    gqa_cp::record(world, part("attn"), q_rot.global, q_rot.layout, saved.attn, exact,
                   {part("q_rot"), part("k_rot"), part("v")});
  }
  std::vector<Tensor<T>> ys(count);
  world.for_each_rank([&](int r) {
    const auto at = static_cast<std::size_t>(r);
    project_out(saved.attn[at], wo.local(r), ys[at]);
  });
  const Layout y_layout = x.layout.with(dim, heads ? Placement::partial() : Placement::replicate());
  DistTensor<T> y = dist_from_locals(world, output, xs, y_layout, std::move(ys));
  world.compare_boundary({.op = op_label(OpKind::gqa_attention),
                          .tensor = output,
                          .exact = exact && !heads,
                          .inputs = {part("attn"), wo.name}},
                         y);
  return y;
}

// The backward above. `g` comes back as gqa_backward_sharded's.
template <typename T>
GqaShardedGrads<T> gqa_cp_backward(const World<T>& world, int cp_dim, GqaCpMode mode,
                                   const DistTensor<T>& dy_held, const DistTensor<T>& x,
                                   const DistTensor<T>& wq, const DistTensor<T>& wk,
                                   const DistTensor<T>& wv, const DistTensor<T>& wo,
                                   const std::string& output, const GqaCpSaved<T>& saved,
                                   bool kv_grad_unreduced) {
  const World<T> cp = world.on(cp_dim);
  const auto count = static_cast<std::size_t>(x.ranks());
  GqaShardedGrads<T> g = gqa_grad_tensors(world, dy_held, x, wq, wk, wv, wo, kv_grad_unreduced);
  const DistTensor<T>& dy = g.dy;
  std::vector<Tensor<T>> dattn(count), dq(count), dk(count), dv(count);
  world.for_each_rank([&](int r) {
    const auto at = static_cast<std::size_t>(r);
    project_out_backward(dy.local(r), saved.attn[at], wo.local(r), dattn[at], g.dwo.local(r));
  });
  const auto part = [&](const char* p) { return part_name(output, p); };
  const Shape& kv_shape = wk.global;  // (hidden, kv_head, head_dim): the head axes
  const Shape kv_rows({x.global[0], x.global[1], kv_shape[1], kv_shape[2]});
  const Shape q_rows({x.global[0], x.global[1], wq.global[1], wq.global[2]});
  const Layout q_layout = dy.layout.with(world.dim(), world.placement(wq));
  // A kv head's gradient is each rank's query heads' share when the heads are split and the kv
  // heads are not.
  const bool kv_partial = g.heads && world.placement(wk).is_replicate();
  const Layout kv_layout =
      dy.layout.with(world.dim(), kv_partial ? Placement::partial() : world.placement(wk));
  const DistTensor<T> dattn_d =
      dist_from_locals(world, grad_name(part("attn")), q_rows, q_layout, std::move(dattn));
  if (mode == GqaCpMode::allgather) {
    const std::vector<std::int64_t> all = position_range(0, x.global.extent("seq"));
    world.for_each_rank([&](int r) {
      const auto at = static_cast<std::size_t>(r);
      gqa_attend_backward(dattn_d.local(r), saved.q_rot[at], saved.positions[at], saved.k_all[at],
                          saved.v_all[at], all, saved.core[at], saved.params[at], dq[at], dk[at],
                          dv[at]);
    });
    const std::vector<std::string> inputs{grad_name(part("attn")), part("q_rot"), part("k_all"),
                                          part("v_all")};
    const auto scatter = [&](const char* what, std::vector<Tensor<T>>& parts) {
      const Placement to = x.layout.on(cp_dim);
      const DistTensor<T> partial =
          dist_from_locals(world, grad_name(part(what)), kv_rows,
                           kv_layout.with(cp_dim, Placement::partial()), std::move(parts));
      DistTensor<T> owned = cp.reduce_scatter(partial, to, {.inputs = inputs});
      parts.assign(count, Tensor<T>());
      world.for_each_rank(
          [&](int r) { parts[static_cast<std::size_t>(r)] = std::move(owned.local(r)); });
    };
    scatter("k_rot", dk);
    scatter("v", dv);
  } else if (mode == GqaCpMode::ulysses) {
    gqa_ulysses_backward(cp, dattn_d, kv_layout, kv_rows, output, saved.ulysses, dq, dk, dv);
  } else {
    gqa_cp::ring_backward(cp, dattn_d, saved, dq, dk, dv);
    const std::vector<std::string> inputs{grad_name(part("attn")), part("q_rot"), part("k_rot"),
                                          part("v"), part("attn")};
    gqa_cp::record(world, grad_name(part("k_rot")), kv_rows, kv_layout, dk, false, inputs, true);
    gqa_cp::record(world, grad_name(part("v")), kv_rows, kv_layout, dv, false, inputs, true);
  }
  if (mode != GqaCpMode::ulysses) {  // ulysses' all-to-all back recorded it
    gqa_cp::record(world, grad_name(part("q_rot")), q_rows, q_layout, dq, false,
                   {grad_name(part("attn")), part("q_rot")}, true);
  }
  world.for_each_rank([&](int r) {
    const auto at = static_cast<std::size_t>(r);
    Tensor<T> dq_pre, dk_pre;
    gqa_rows_backward(dq[at], dk[at], dv[at], x.local(r), wq.local(r), wk.local(r), wv.local(r),
                      saved.params[at], saved.positions[at], dq_pre, dk_pre, g.dx.local(r),
                      g.dwq.local(r), g.dwk.local(r), g.dwv.local(r));
  });
  return g;
}

}  // namespace shardsim
