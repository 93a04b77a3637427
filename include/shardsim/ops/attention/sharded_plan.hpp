// Context-parallel attention with sequence-sharded queries: the input x is Shard(seq) on the cp
// dim (torch.chunk or tensor_split slices), so every cp rank owns its own tokens end to end.
// cp_mode = "allgather", one chunk (no [stream], so no cache):
//
//   1. NAME.q, NAME.k, NAME.v = x wq, x wk, x wv on each rank's own tokens (Shard(seq)), exact;
//   2. NAME.q_rot: each rank rotates its queries at their absolute positions (its slice's
//      global positions), exact;
//   3. NAME.k_shard: each rank rotates its keys at their absolute positions and renames its rows
//      onto the KV axis (Shard(kv), compared with the oracle's NAME.k_all); NAME.v_shard likewise
//      (compared with NAME.v_all); both all-gathered to NAME.k_all and NAME.v_all (Replicate on
//      the cp dim), exact: only the keys and values move, never the queries;
//   4. NAME.lse, NAME.attn: each rank's queries against every key, masked with the global query
//      and key positions (0 <= q_pos - k_pos < window), Shard(seq), exact (the oracle's rows);
//   5. NAME = attn wo on each rank's rows, Shard(seq), exact.
// Backward: grad(NAME.attn) and the Partial grad(wo) on each rank's rows; the block backward of
// attention (attention.hpp, from the saved lse) gives each rank's grad(NAME.q_rot) and its
// queries' contributions to dK and dV over the whole KV axis, Partial on the cp dim, which are
// reduce-scattered back to their owners (grad(NAME.k_shard), grad(NAME.v_shard): Shard(kv));
// inverse RoPE at the owners' positions; the input projections give grad(x) (Shard(seq)) and
// the weights' gradients, Partial on every dim that splits the rows.
#pragma once

#include <string>
#include <vector>

#include "shardsim/ops/attention/plan_backward.hpp"
#include "shardsim/ops/attention/plan_common.hpp"

namespace shardsim {

template <typename T>
struct CpShardedSaved {
  std::vector<std::vector<std::int64_t>> positions;  // per rank: its tokens' absolute positions
  // per rank: the query positions the mask compared (the positions, or with the
  // mask_local_query_positions fault its row indices), for the backward's mask
  std::vector<std::vector<std::int64_t>> mask_positions;
  Layout param_grad;  // Partial on every dim that splits the rows (the cp dim included)
  DistTensor<T> q_rot, k_all, v_all, lse, attn;
};

namespace detail {

// x's layout with `placement` on the cp dim and the seq axis renamed to kv where it is sharded.
inline Layout kv_layout(const Layout& seq_layout, int cp_dim) {
  const Placement& p = seq_layout.on(cp_dim);
  return seq_layout.with(cp_dim, Placement::shard("kv", p.split));
}

// A rank's (batch, POS=n, head, head_dim) rows with the position axis renamed to `to`
// ("seq" <-> "kv"): the same values in the same order.
template <typename T>
Tensor<T> renamed(const Tensor<T>& t, const std::string& to) {
  const Shape& s = t.shape();
  return t.reshaped(head_shape(s.extent("batch"), to, s.axes()[1].extent, s.extent("head"),
                               s.extent("head_dim")));
}

// Phase 3: every rank's keys RoPE'd at its positions and its values, renamed onto the KV axis
// (NAME.k_shard, NAME.v_shard: Shard(kv)), then all-gathered into saved.k_all and saved.v_all.
template <typename T>
void sharded_keys_values(const World<T>& world, const CpAttentionConfig& config,
                         const DistTensor<T>& k, const DistTensor<T>& v, CpShardedSaved<T>& saved) {
  const Shape& g = k.global;  // (batch, seq, head, head_dim)
  const Shape kv = head_shape(g.extent("batch"), "kv", g.extent("seq"), g.extent("head"),
                              g.extent("head_dim"));
  const Layout kv_rows = kv_layout(k.layout, world.dim());
  auto positions = [&](int r) -> const std::vector<std::int64_t>& {
    return saved.positions[static_cast<std::size_t>(r)];
  };
  const DistTensor<T> k_shard = replicated_phase(
      world, config.part(AttentionPart::k_shard), kv, kv_rows,
      {.op = "rope", .dense = config.part(AttentionPart::k_all), .exact = true, .inputs = {k.name}},
      [&](int r) {
        Tensor<T> y;
        rope_forward(k.local(r), positions(r), config.rope("seq"), y);
        return renamed(y, "kv");
      });
  const DistTensor<T> v_shard =
      replicated_phase(world, config.part(AttentionPart::v_shard), kv, kv_rows,
                       {.op = "kv_shard",
                        .dense = config.part(AttentionPart::v_all),
                        .exact = true,
                        .inputs = {v.name}},
                       [&](int r) { return renamed(v.local(r), "kv"); });
  saved.k_all = world.all_gather(
      k_shard,
      {.tensor = config.part(AttentionPart::k_all), .exact = true, .inputs = {k_shard.name}});
  saved.k_all.name = config.part(AttentionPart::k_all);
  saved.v_all = world.all_gather(
      v_shard,
      {.tensor = config.part(AttentionPart::v_all), .exact = true, .inputs = {v_shard.name}});
  saved.v_all.name = config.part(AttentionPart::v_all);
}

}  // namespace detail

// REQUIRES: x is Shard(seq) (chunk or balanced) on the world's dim; weights Replicate there.
template <typename T>
DistTensor<T> cp_sharded_attention_forward(const World<T>& world, const DistTensor<T>& x,
                                           const DistTensor<T>& wq, const DistTensor<T>& wk,
                                           const DistTensor<T>& wv, const DistTensor<T>& wo,
                                           const CpAttentionConfig& config,
                                           CpShardedSaved<T>& saved) {
  const Layout& rows = x.layout;
  saved.param_grad = row_sum_grad_layout(rows, rows);
  const std::int64_t batch = x.global.extent("batch"), length = x.global.extent("seq");
  const std::int64_t heads = wq.global.extent("head"), dim = wq.global.extent("head_dim");
  const Shape chunk = head_shape(batch, "seq", length, heads, dim);
  saved.positions.assign(static_cast<std::size_t>(world.size()), {});
  world.for_each_rank([&](int r) {
    const Slice s = x.slice(r, "seq");
    saved.positions[static_cast<std::size_t>(r)] = position_range(s.begin, s.valid());
  });
  auto positions = [&](int r) -> const std::vector<std::int64_t>& {
    return saved.positions[static_cast<std::size_t>(r)];
  };
  auto project = [&](AttentionPart part, const DistTensor<T>& w) {
    return replicated_phase(world, config.part(part), chunk, rows,
                            {.op = "attention_project", .exact = true, .inputs = {x.name, w.name}},
                            [&](int r) {
                              Tensor<T> y;
                              project_heads(x.local(r), w.local(r), y);
                              return y;
                            });
  };
  const DistTensor<T> q = project(AttentionPart::q, wq);
  const DistTensor<T> k = project(AttentionPart::k, wk);
  const DistTensor<T> v = project(AttentionPart::v, wv);
  saved.q_rot = replicated_phase(world, config.part(AttentionPart::q_rot), chunk, rows,
                                 {.op = "rope", .exact = true, .inputs = {q.name}}, [&](int r) {
                                   Tensor<T> y;
                                   rope_forward(q.local(r), positions(r), config.rope("seq"), y);
                                   return y;
                                 });
  detail::sharded_keys_values(world, config, k, v, saved);

  const std::vector<std::int64_t> k_pos = position_range(0, length);
  // The positions the mask compares (the fault: each rank's rows counted from 0), kept for the
  // backward, which must mask as the forward did.
  saved.mask_positions.assign(static_cast<std::size_t>(world.size()), {});
  world.for_each_rank([&](int r) {
    saved.mask_positions[static_cast<std::size_t>(r)] =
        config.faults.mask_local_query_positions
            ? position_range(0, static_cast<std::int64_t>(positions(r).size()))
            : positions(r);
  });
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
  saved.lse = dist_from_locals(world, config.part(AttentionPart::lse),
                               Shape({{"batch", batch}, {"seq", length}, {"head", heads}}), rows,
                               std::move(lse));
  world.compare_boundary(
      {.op = "attention", .tensor = saved.lse.name, .exact = true, .inputs = inputs}, saved.lse);
  saved.attn =
      dist_from_locals(world, config.part(AttentionPart::attn), chunk, rows, std::move(out));
  world.compare_boundary(
      {.op = "attention", .tensor = saved.attn.name, .exact = true, .inputs = inputs}, saved.attn);
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

// From grad(NAME) held like x (Shard(seq) on the cp dim).
template <typename T>
CpAttentionGrads<T> cp_sharded_attention_backward(const World<T>& world, const DistTensor<T>& dy,
                                                  const DistTensor<T>& x, const DistTensor<T>& wq,
                                                  const DistTensor<T>& wk, const DistTensor<T>& wv,
                                                  const DistTensor<T>& wo,
                                                  const CpAttentionConfig& config,
                                                  const CpShardedSaved<T>& saved) {
  const Layout& rows = x.layout;
  const int cp = world.dim();
  const auto count = static_cast<std::size_t>(world.size());
  const Shape& chunk = saved.attn.global;
  const Shape& kv = saved.k_all.global;
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

  // The block backward of every rank's queries against every key.
  const std::vector<std::int64_t> k_pos = position_range(0, kv.extent("kv"));
  std::vector<Tensor<T>> dq(count), dk(count), dv(count);
  world.for_each_rank([&](int r) {
    const auto at = static_cast<std::size_t>(r);
    dq[at] = Tensor<T>(saved.q_rot.local(r).shape());
    dk[at] = Tensor<T>(saved.k_all.local(r).shape());
    dv[at] = Tensor<T>(saved.v_all.local(r).shape());
    attention_block_backward(dattn_rows.local(r), saved.q_rot.local(r), saved.mask_positions[at],
                             saved.k_all.local(r), saved.v_all.local(r), k_pos, saved.attn.local(r),
                             saved.lse.local(r), config.attention(), dq[at], dk[at], dv[at]);
  });
  const std::vector<std::string> inputs{dattn_rows.name, saved.q_rot.name, saved.k_all.name,
                                        saved.v_all.name, saved.lse.name};
  DistTensor<T> dq_rot =
      dist_from_locals(world, grad_name(saved.q_rot.name), chunk, rows, std::move(dq));
  world.compare_boundary({.op = "attention_backward", .tensor = dq_rot.name, .inputs = inputs},
                         dq_rot);
  // Each rank's contributions to every key and value, summed at their owners.
  const Layout partial = saved.k_all.layout.with(cp, Placement::partial());
  const Placement owners = detail::kv_layout(rows, cp).on(cp);
  auto to_owners = [&](AttentionPart shard, AttentionPart all, std::vector<Tensor<T>> locals) {
    const DistTensor<T> sums =
        dist_from_locals(world, config.part_grad(shard), kv, partial, std::move(locals));
    DistTensor<T> owned = world.reduce_scatter(
        sums, owners, {.tensor = sums.name, .dense = config.part_grad(all), .inputs = inputs});
    owned.name = sums.name;
    return owned;
  };
  const DistTensor<T> dk_shard =
      to_owners(AttentionPart::k_shard, AttentionPart::k_all, std::move(dk));
  const DistTensor<T> dv_shard =
      to_owners(AttentionPart::v_shard, AttentionPart::v_all, std::move(dv));
  const DistTensor<T> dq_raw = replicated_phase(
      world, config.part_grad(AttentionPart::q), chunk, rows,
      {.op = "rope_backward", .inputs = {dq_rot.name}}, [&](int r) {
        Tensor<T> y;
        rope_backward(dq_rot.local(r), saved.positions[static_cast<std::size_t>(r)],
                      config.rope("seq"), y);
        return y;
      });
  const DistTensor<T> dk_raw = replicated_phase(
      world, config.part_grad(AttentionPart::k), chunk, rows,
      {.op = "rope_backward", .inputs = {dk_shard.name}}, [&](int r) {
        Tensor<T> y;
        rope_backward(detail::renamed(dk_shard.local(r), "seq"),
                      saved.positions[static_cast<std::size_t>(r)], config.rope("seq"), y);
        return y;
      });
  const DistTensor<T> dv_raw =
      replicated_phase(world, config.part_grad(AttentionPart::v), chunk, rows,
                       {.op = "kv_shard_backward", .inputs = {dv_shard.name}},
                       [&](int r) { return detail::renamed(dv_shard.local(r), "seq"); });
  ChunkGeometry geo;
  geo.param_grad = saved.param_grad;
  detail::cp_input_projection_backward(world, x, wq, wk, wv, dq_raw, dk_raw, dv_raw, geo, grads);
  return grads;
}

}  // namespace shardsim
