// Sharded plan for the token embedding (docs/ops/language-model.md "Vocab-parallel embedding").
// The ids are Replicate or Shard on a token axis on every dim; the weight [vocab, hidden] is
// Replicate, or Shard(vocab) on the step's dim: Megatron's VocabParallelEmbedding. There each
// rank looks up the ids in its rows and writes zeros for the others (an addend of the output,
// Partial on that dim), and the addends are all-reduced (output Replicate there) or, under
// sequence parallelism, reduce-scattered to Shard(seq). Both are exact: one addend per element
// is not zero. Backward: the output's gradient is brought to Replicate on the vocabulary's dim
// (an all-gather under sequence parallelism), and each rank scatter-adds the tokens it holds
// into its own rows; dW is Partial on every dim whose members hold different tokens, and the
// runner reduces it like any parameter gradient.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/world.hpp"
#include "ops/add/add_plan.hpp"
#include "ops/embedding/embedding.hpp"
#include "ops/op_list.hpp"
#include "ops/token_ids.hpp"

namespace shardsim {

struct EmbeddingSaved {
  std::vector<std::vector<std::int64_t>> ids;  // per rank, its tokens' ids
  std::vector<VocabRows> rows;                 // per rank, its rows of the weight
  Layout tokens;                               // the lookup's layout (Replicate on the vocab dim)
  int vocab_dim = -1;
};

// The dim that shards the weight's vocabulary (its first axis), or -1.
template <typename T>
int embedding_vocab_dim(const DistTensor<T>& weight) {
  const std::string& vocab = weight.global[0].name;
  for (int d = 0; d < weight.layout.ndim(); ++d) {
    if (weight.layout.on(d).is_shard() && weight.layout.on(d).axis == vocab) return d;
  }
  return -1;
}

// ids: the ids' global values, of shape `ids_shape`, laid out as `ids_layout`; with micro-batches
// the output holds rows [batch_begin, batch_begin + rows) of the batch axis (`rows` its extent).
// `unreduced` (the embedding_partial_not_reduced fault): each rank keeps its own addend as if it
// were the reduced output.
template <typename T>
DistTensor<T> embedding_sharded(const World<T>& world, const Shape& ids_shape,
                                const std::vector<std::int64_t>& ids, const Layout& ids_layout,
                                const DistTensor<T>& weight, const Placement& to,
                                const std::string& batch_axis, std::int64_t batch_begin,
                                std::int64_t batch_rows, bool unreduced, const std::string& output,
                                EmbeddingSaved& saved) {
  const Mesh& mesh = *weight.mesh;
  std::vector<Axis> axes = ids_shape.axes();
  if (batch_rows > 0) {
    for (Axis& a : axes) {
      if (a.name == batch_axis) a.extent = batch_rows;
    }
  }
  axes.push_back(weight.global[1]);
  const Shape global(std::move(axes));
  saved.vocab_dim = embedding_vocab_dim(weight);
  saved.tokens = ids_layout;
  const std::size_t ranks = static_cast<std::size_t>(world.size());
  saved.ids.assign(ranks, {});
  saved.rows.assign(ranks, {});
  world.for_each_rank([&](int r) {
    const Slice rows = axis_slice(weight.global, weight.layout, mesh, r, weight.global[0].name);
    saved.rows[static_cast<std::size_t>(r)] = {rows.begin, rows.valid()};
    saved.ids[static_cast<std::size_t>(r)] = frame_labels(
        ids_shape, ids, token_frame(global, ids_layout, mesh, r, ids_shape, batch_axis, batch_begin));
  });
  const int dv = saved.vocab_dim;
  const Layout lookup_layout = dv < 0 ? ids_layout : ids_layout.with(dv, Placement::partial());
  DistTensor<T> y = world.make(dv < 0 || unreduced ? output : part_name(output, "lookup"), global,
                               unreduced ? ids_layout : lookup_layout);
  world.for_each_rank([&](int r) {
    const std::size_t i = static_cast<std::size_t>(r);
    embedding_forward(saved.ids[i], weight.local(r), saved.rows[i], y.local(r));
  });
  zero_padding(y);
  const BoundaryLabel label{.op = op_label(OpKind::embedding),
                            .tensor = output,
                            .exact = true,
                            .inputs = {weight.name}};
  if (dv < 0 || unreduced) {
    world.compare_boundary(label, y);
    if (dv >= 0 && !to.is_replicate()) {
      // The fault under sequence parallelism: each rank's addend sliced to its sequence shard.
      y = world.on(dv).redistribute(y, to, {.tensor = moved_name(output, to.str()),
                                            .dense = output,
                                            .exact = true,
                                            .inputs = {output}});
      y.name = output;
    }
    return y;
  }
  DistTensor<T> out = to.is_replicate()
                          ? world.on(dv).all_reduce(y, {.op = "all_reduce",
                                                        .tensor = output,
                                                        .exact = true,
                                                        .inputs = {weight.name}})
                          : world.on(dv).reduce_scatter(y, to,
                                                        {.op = "reduce_scatter",
                                                         .tensor = output,
                                                         .exact = true,
                                                         .inputs = {weight.name}});
  out.name = output;
  return out;
}

// grad(weight), laid out as the weight on the vocabulary's dim and Partial on every dim whose
// members hold different tokens or addends of dy. dy is brought to the lookup's layout
// (Replicate on the vocabulary's dim) first.
template <typename T>
DistTensor<T> embedding_backward_sharded(const World<T>& world, const DistTensor<T>& dy,
                                         const DistTensor<T>& weight, const EmbeddingSaved& saved,
                                         const std::string& output, bool& exact) {
  Layout target = saved.tokens;
  for (int d = 0; d < target.ndim(); ++d) {
    target.dims[static_cast<std::size_t>(d)] =
        d == saved.vocab_dim ? Placement::replicate()
                             : elementwise_grad_target(saved.tokens.on(d), dy.layout.on(d));
  }
  const DistTensor<T> aligned = align_grad(world, dy, target);
  Layout grad_layout = weight.layout;
  exact = true;
  for (int d = 0; d < grad_layout.ndim(); ++d) {
    if (d == saved.vocab_dim) continue;
    if (!aligned.layout.on(d).is_replicate()) {
      grad_layout.dims[static_cast<std::size_t>(d)] = Placement::partial();
      exact = false;  // the tokens' rows are summed in another order
    }
  }
  DistTensor<T> dw = world.make(output, weight.global, grad_layout);
  world.for_each_rank([&](int r) {
    const std::size_t i = static_cast<std::size_t>(r);
    embedding_backward(saved.ids[i], aligned.local(r), saved.rows[i], dw.local(r));
  });
  zero_padding(dw);
  return dw;
}

}  // namespace shardsim
