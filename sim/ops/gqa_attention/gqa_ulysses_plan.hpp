// cp_mode = "ulysses" of context-parallel GQA attention (gqa_cp_plan.hpp; DeepSpeed-Ulysses):
// the rotated queries move by all-to-all from the tokens' owners (Shard(seq) on cp) to head
// groups (Shard(head) on cp: each cp rank all positions of n_head_local / cp query heads); the
// rotated keys and values move the same way to Shard(kv_head) when the kv heads split like the
// query heads (wk placed like wq on the heads' dim, n_kv_head_local divisible by cp, so a rank's
// query heads read exactly its kv heads), else they are all-gathered over cp (every rank keeps
// the kv heads of its heads' dim). Each rank then runs the dense kernel on its heads over every
// position in order: NAME.attn_heads is the oracle's attn on those heads bit for bit, and the
// all-to-all back gives NAME.attn, Shard(seq), exact. Under tensor parallelism the cp groups
// re-split each heads' dim rank's heads: the heads' dim must precede the cp dim in the mesh (the
// layout [.., Shard(head) on tp, .., Shard(head) on cp] splits by tp first).
//
// Backward: grad(NAME.attn) to head groups (all-to-all), the kernel's backward on each rank's
// heads, then grad(NAME.q_heads) back to the tokens' owners (all-to-all) as grad(NAME.q_rot);
// grad(NAME.k_heads), grad(NAME.v_heads) back by all-to-all (each kv head's query heads all on
// its rank: complete sums), or, all-gathered, Partial over cp (each rank's query heads' share)
// and reduce-scattered to the owners, as grad(NAME.k_rot), grad(NAME.v).
#pragma once

#include <string>
#include <vector>

#include "ops/attention/plan_common.hpp"
#include "ops/gqa_attention/gqa_plan.hpp"

namespace shardsim {

// Ulysses' head-group tensors, per mesh rank (GqaCpSaved::ulysses).
template <typename T>
struct GqaUlyssesSaved {
  bool kv_to_heads = false;             // k, v all-to-all'd to Shard(kv_head); else all-gathered
  std::vector<GqaParams> params;        // each rank's first query head and kv head there
  std::vector<Tensor<T>> q, k, v;       // every position of its heads
  std::vector<AttentionSaved<T>> core;  // its heads' softmax
  Layout q_layout, kv_layout;           // of q and of k, v (forward)
};

// Whether the kv heads can follow their query heads to the head groups (see above).
template <typename T>
bool gqa_ulysses_kv_to_heads(const World<T>& world, int cp_size, const DistTensor<T>& wq,
                             const DistTensor<T>& wk, const GqaParams& params) {
  const bool alike = world.placement(wq).is_shard() == world.placement(wk).is_shard();
  const std::int64_t local_kv =
      world.placement(wk).is_shard() ? params.n_kv_head / world.group_size() : params.n_kv_head;
  return !params.wrong_group && alike && local_kv % cp_size == 0;
}

// Forward from the rows (Shard(seq) on cp): returns NAME.attn laid out like q_rot.
template <typename T>
DistTensor<T> gqa_ulysses_forward(const World<T>& cp, const DistTensor<T>& q_rot,
                                  const DistTensor<T>& k_rot, const DistTensor<T>& v,
                                  const std::vector<GqaParams>& row_params, bool kv_to_heads,
                                  const std::string& output, GqaUlyssesSaved<T>& u) {
  const auto part = [&](const char* p) { return part_name(output, p); };
  const auto count = static_cast<std::size_t>(q_rot.ranks());
  u = GqaUlyssesSaved<T>();
  u.kv_to_heads = kv_to_heads;
  const DistTensor<T> q = cp.all_to_all(
      q_rot, Placement::shard("head"),
      {.tensor = part("q_heads"), .dense = part("q_rot"), .exact = true, .inputs = {q_rot.name}});
  const auto move_kv = [&](const DistTensor<T>& t, const char* name, const std::string& dense) {
    const BoundaryLabel label{
        .tensor = part(name), .dense = dense, .exact = true, .inputs = {t.name}};
    return kv_to_heads ? cp.all_to_all(t, Placement::shard("kv_head"), label)
                       : cp.all_gather(t, label);
  };
  const DistTensor<T> k = move_kv(k_rot, "k_heads", part("k_rot"));
  const DistTensor<T> vh = move_kv(v, "v_heads", part("v"));
  u.q_layout = q.layout;
  u.kv_layout = k.layout;
  u.params = row_params;
  u.q.resize(count);
  u.k.resize(count);
  u.v.resize(count);
  u.core.resize(count);
  for (int r = 0; r < q.ranks(); ++r) {
    GqaParams& p = u.params[static_cast<std::size_t>(r)];
    p.head_offset = q.slice(r, "head").begin;
    if (kv_to_heads) p.kv_offset = k.slice(r, "kv_head").begin;
  }
  std::vector<Tensor<T>> attn(count);
  const std::vector<std::int64_t> all = position_range(0, q_rot.global.extent("seq"));
  cp.for_each_rank([&](int r) {
    const auto at = static_cast<std::size_t>(r);
    u.q[at] = q.local(r);
    u.k[at] = k.local(r);
    u.v[at] = vh.local(r);
    gqa_attend(u.q[at], all, u.k[at], u.v[at], all, u.params[at], attn[at], u.core[at]);
  });
  DistTensor<T> heads =
      dist_from_locals(cp, part("attn_heads"), q_rot.global, q.layout, std::move(attn));
  cp.compare_boundary({.op = op_label(OpKind::gqa_attention),
                       .tensor = heads.name,
                       .dense = part("attn"),
                       .exact = true,
                       .inputs = {part("q_heads"), part("k_heads"), part("v_heads")}},
                      heads);
  return cp.all_to_all(heads, cp.placement(q_rot),
                       {.tensor = part("attn"), .exact = true, .inputs = {heads.name}});
}

// Backward from grad(NAME.attn) laid out like the rows: dq, dk, dv per rank, on its rows.
template <typename T>
void gqa_ulysses_backward(const World<T>& cp, const DistTensor<T>& dattn,
                          const Layout& kv_rows_layout, const Shape& kv_rows,
                          const std::string& output, const GqaUlyssesSaved<T>& u,
                          std::vector<Tensor<T>>& dq, std::vector<Tensor<T>>& dk,
                          std::vector<Tensor<T>>& dv) {
  const auto part = [&](const char* p) { return part_name(output, p); };
  const auto count = static_cast<std::size_t>(dattn.ranks());
  const Placement rows = cp.placement(dattn);
  const DistTensor<T> dheads = cp.all_to_all(dattn, Placement::shard("head"),
                                             {.tensor = grad_name(part("attn_heads")),
                                              .dense = grad_name(part("attn")),
                                              .inputs = {dattn.name}});
  std::vector<Tensor<T>> dqh(count), dkh(count), dvh(count);
  const std::vector<std::int64_t> all = position_range(0, dattn.global.extent("seq"));
  cp.for_each_rank([&](int r) {
    const auto at = static_cast<std::size_t>(r);
    gqa_attend_backward(dheads.local(r), u.q[at], all, u.k[at], u.v[at], all, u.core[at],
                        u.params[at], dqh[at], dkh[at], dvh[at]);
  });
  const std::vector<std::string> inputs{dheads.name, part("q_heads"), part("k_heads"),
                                        part("v_heads")};
  const auto back = [&](DistTensor<T> from, const char* to, std::vector<Tensor<T>>& out) {
    const BoundaryLabel label{.tensor = grad_name(part(to)), .inputs = inputs};
    const DistTensor<T> moved = from.layout.on(cp.dim()).is_partial()
                                    ? cp.reduce_scatter(from, rows, label)
                                    : cp.all_to_all(from, rows, label);
    out.assign(count, Tensor<T>());
    cp.for_each_rank([&](int r) { out[static_cast<std::size_t>(r)] = moved.local(r); });
  };
  back(
      dist_from_locals(cp, grad_name(part("q_heads")), dattn.global, dheads.layout, std::move(dqh)),
      "q_rot", dq);
  const Layout kv_layout = kv_rows_layout.with(
      cp.dim(), u.kv_to_heads ? Placement::shard("kv_head") : Placement::partial());
  back(dist_from_locals(cp, grad_name(part("k_heads")), kv_rows, kv_layout, std::move(dkh)),
       "k_rot", dk);
  back(dist_from_locals(cp, grad_name(part("v_heads")), kv_rows, kv_layout, std::move(dvh)), "v",
       dv);
}

}  // namespace shardsim
