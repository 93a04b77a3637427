// Sharded plan for cross-entropy (cross_entropy.hpp), Megatron's vocab-parallel algorithm
// (docs/ops/language-model.md "Vocab-parallel cross-entropy"). The logits [tokens..., vocab] are
// Replicate or Shard(vocab) on the step's mesh dim, and Replicate or Shard on a token axis on
// every other dim. On the vocabulary dim, in this order:
//   1. each rank's maximum over its real columns; the maxima are all-gathered and each rank takes
//      their maximum (an all-reduce(MAX), exact in any order: "loss.max");
//   2. each rank's sum of exp(x - max) over its real columns, all-reduced ("loss.sumexp");
//   3. the target's logit from the rank that holds the class, 0 on the others, all-reduced
//      ("loss.target_logit", exact: one addend is not zero);
//   4. with label smoothing, each rank's sum of its logits, all-reduced ("loss.logit_sum");
//   5. every rank: lse = log(sumexp) + max ("loss.lse") and each token's loss.
// Then the token dims, as mse_loss does: each rank's sum over its counted tokens and its count
// are all-reduced over every dim that shards the tokens, in mesh-dim order ("loss.sum",
// "loss.valid_tokens"), and the loss is sum / count, divided once. With micro-batches the count
// is the whole step's ("loss.step_valid_tokens"). Padded vocabulary columns never enter a max,
// a sum or a gradient. Backward needs no collective: each rank writes its columns' gradient from
// the replicated max, sumexp and lse.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/world.hpp"
#include "ops/cross_entropy/cross_entropy.hpp"
#include "ops/token_ids.hpp"
#include "ops/op_list.hpp"

namespace shardsim {

// The parts of a cross_entropy step's output ("OUTPUT.max", ...). The token sums and counts use
// mse_loss's names (loss_parts), so the runner's micro-batch bookkeeping reads either loss alike.
namespace cross_entropy_parts {
inline constexpr std::string_view max = "max";
inline constexpr std::string_view max_shards = "max_shards";  // the gathered per-rank maxima
inline constexpr std::string_view sumexp = "sumexp";
inline constexpr std::string_view target_logit = "target_logit";
inline constexpr std::string_view logit_sum = "logit_sum";
inline constexpr std::string_view lse = "lse";
inline constexpr std::string_view sum = "sum";
inline constexpr std::string_view valid_tokens = "valid_tokens";
inline constexpr std::string_view step_valid_tokens = "step_valid_tokens";
}  // namespace cross_entropy_parts

// Seeded bugs (faults), the sharded plan only.
struct CrossEntropyFaults {
  bool local_max = false;           // ce_local_max: no all-reduce of the maxima
  bool target_every_rank = false;   // ce_target_every_rank: non-owners add their column 0
  bool ignored_counted = false;     // ce_ignored_tokens_counted: the count includes ignored tokens
  bool padding_in_softmax = false;  // vocab_padding_in_softmax: padded columns enter max and sum
};

// Micro-batches (MicroTokens in ops/loss/loss_plan.hpp has the same meaning): the micro-batch
// index (0: none), its first row, and every micro-batch's row count.
struct CrossEntropyMicro {
  int index = 0;
  std::int64_t batch_begin = 0;
  std::vector<std::int64_t> rows;
};

template <typename T>
struct CrossEntropySaved {
  std::vector<std::vector<std::int64_t>> labels;  // per rank, its tokens' labels
  std::vector<VocabColumns> columns;              // per rank
  std::vector<T> divisor;                         // per rank: what the loss was divided by
  DistTensor<T> max, sumexp, lse;                 // token-shaped, Replicate on the vocab dim
};

// The dim that shards the vocabulary, or -1.
inline int vocab_dim(const Layout& layout, const std::string& vocab_axis) {
  for (int d = 0; d < layout.ndim(); ++d) {
    if (layout.on(d).is_shard() && layout.on(d).axis == vocab_axis) return d;
  }
  return -1;
}

// Step 1: the per-token maximum over the vocabulary, on every rank. Vocab-parallel: each rank's
// maximum over its real columns, all-gathered over the vocabulary's dim `dv`, then their maximum
// (`local_max`, the ce_local_max fault: each rank keeps its own).
template <typename T>
DistTensor<T> ce_max_sharded(const World<T>& world, const DistTensor<T>& y, int dv,
                             const Shape& tokens, const Layout& token_layout, bool with_pad,
                             bool local_max, const std::string& output,
                             const CrossEntropySaved<T>& saved) {
  namespace parts = cross_entropy_parts;
  const Mesh& mesh = *y.mesh;
  const std::vector<std::string> from_logits{y.name};
  DistTensor<T> max = world.make(part_name(output, parts::max), tokens, token_layout);
  if (dv < 0 || local_max) {
    world.for_each_rank([&](int r) {
      ce_row_max(y.local(r), saved.columns[static_cast<std::size_t>(r)], with_pad, max.local(r));
    });
  } else {
    const int k = mesh.dim(dv).size;
    std::vector<Axis> axes{{"vocab_shard", k}};
    for (const Axis& a : tokens.axes()) axes.push_back(a);
    DistTensor<T> shards =
        world.make(part_name(output, parts::max_shards), Shape(std::move(axes)),
                   token_layout.with(dv, Placement::shard("vocab_shard")));
    world.for_each_rank([&](int r) {
      ce_row_max(y.local(r), saved.columns[static_cast<std::size_t>(r)], with_pad,
                 shards.local(r));
    });
    const DistTensor<T> gathered = world.on(dv).all_gather(
        shards, {.op = "all_gather", .tensor = shards.name, .inputs = from_logits,
                 .has_oracle = false});
    world.for_each_rank([&](int r) {
      const Tensor<T>& all = gathered.local(r);
      Tensor<T>& m = max.local(r);
      for (std::int64_t t = 0; t < m.numel(); ++t) {
        T best = all[t];
        for (int s = 1; s < k; ++s) {
          const T& v = all[s * m.numel() + t];
          if (v > best) best = v;
        }
        m[t] = best;
      }
    });
  }
  world.compare_boundary({.op = op_label(OpKind::cross_entropy),
                          .tensor = max.name,
                          .exact = true,
                          .inputs = from_logits},
                         max);

  return max;
}

// The token dims, as mse_loss does: each rank's sum of its counted tokens' losses and its count,
// all-reduced over every dim other than the vocabulary's `dv` that shards the tokens; with
// micro-batches the whole step's count; then the loss, divided once.
template <typename T>
DistTensor<T> ce_reduce_tokens(const World<T>& world, const DistTensor<T>& y, int dv,
                               const Shape& labels, const std::vector<std::int64_t>& ids,
                               const std::string& batch_axis, const CrossEntropyParams& params,
                               const CrossEntropyFaults& faults, const std::string& output,
                               const CrossEntropyMicro& micro,
                               const std::vector<Tensor<T>>& token_loss,
                               const std::vector<std::string>& token_inputs,
                               CrossEntropySaved<T>& saved) {
  namespace parts = cross_entropy_parts;
  const Mesh& mesh = *y.mesh;
  // The token dims: sums and counts Partial where the tokens are sharded.
  const Shape scalar;
  Layout partial = Layout::uniform(y.layout.ndim(), Placement::replicate());
  bool sharded_tokens = false;
  for (int d = 0; d < y.layout.ndim(); ++d) {
    if (d != dv && y.layout.on(d).is_shard()) {
      partial.dims[static_cast<std::size_t>(d)] = Placement::partial();
      sharded_tokens = true;
    }
  }
  DistTensor<T> sums = world.make(part_name(output, parts::sum), scalar, partial);
  DistTensor<T> counts = world.make(part_name(output, parts::valid_tokens), scalar, partial);
  world.for_each_rank([&](int r) {
    std::int64_t count = 0;
    T sum = T(0);
    ce_sum_tokens(token_loss[static_cast<std::size_t>(r)], saved.labels[static_cast<std::size_t>(r)],
                  params, faults.ignored_counted, sum, count);
    sums.local(r)[0] = sum;
    counts.local(r)[0] = T(count);
  });
  auto reduce_tokens = [&](DistTensor<T> t, bool exact) {
    if (!sharded_tokens) {
      world.compare_boundary({.op = op_label(OpKind::cross_entropy),
                              .tensor = t.name,
                              .exact = exact,
                              .inputs = token_inputs},
                             t);
      return t;
    }
    const std::string name = t.name;
    for (int d = 0; d < partial.ndim(); ++d) {
      if (!partial.on(d).is_partial()) continue;
      t = world.on(d).all_reduce(
          t, {.op = "all_reduce", .tensor = name, .exact = exact, .inputs = token_inputs});
    }
    return t;
  };
  const DistTensor<T> total = reduce_tokens(std::move(sums), dv < 0 && !sharded_tokens);
  const DistTensor<T> valid = reduce_tokens(std::move(counts), true);
  std::vector<std::string> from{total.name, valid.name};
  DistTensor<T> divisor_tensor = valid;
  if (micro.index > 0) {
    // The whole step's count: each rank counts its tokens of every micro-batch (a data loader
    // knows its labels before the accumulation loop), all-reduced over the token dims.
    DistTensor<T> step = world.make(part_name(output, parts::step_valid_tokens), scalar, partial);
    world.for_each_rank([&](int r) {
      std::int64_t count = 0;
      std::int64_t begin = 0;
      for (std::int64_t rows : micro.rows) {
        const Shape global = y.global.with_extent(batch_axis, rows);
        const std::vector<std::int64_t> l = frame_labels(
            labels, ids, token_frame(global, y.layout, mesh, r, labels, batch_axis, begin));
        for (std::int64_t label : l) {
          if (params.counts(label) || (faults.ignored_counted && label != kPadToken)) ++count;
        }
        begin += rows;
      }
      step.local(r)[0] = T(count);
    });
    divisor_tensor = reduce_tokens(std::move(step), true);
    from.push_back(divisor_tensor.name);
  }
  DistTensor<T> loss = world.make(output, scalar, Layout::uniform(y.layout.ndim(),
                                                                  Placement::replicate()));
  world.for_each_rank([&](int r) {
    const T divisor = divisor_tensor.local(r)[0];
    saved.divisor[static_cast<std::size_t>(r)] = divisor;
    loss.local(r)[0] = total.local(r)[0] / divisor;
  });
  world.compare_boundary({.op = op_label(OpKind::cross_entropy),
                          .tensor = output,
                          .exact = dv < 0 && !sharded_tokens,
                          .inputs = from},
                         loss);
  return loss;
}

// Each rank's vocabulary columns and its tokens' labels (saved for the backward).
template <typename T>
void ce_rank_tokens(const World<T>& world, const DistTensor<T>& y, const Shape& labels,
                    const std::vector<std::int64_t>& ids, const std::string& vocab_axis,
                    const std::string& batch_axis, std::int64_t batch_begin,
                    CrossEntropySaved<T>& saved) {
  const Mesh& mesh = *y.mesh;
  const std::size_t ranks = static_cast<std::size_t>(world.size());
  saved.labels.assign(ranks, {});
  saved.columns.assign(ranks, {});
  saved.divisor.assign(ranks, T(0));
  world.for_each_rank([&](int r) {
    const Slice cols = axis_slice(y.global, y.layout, mesh, r, vocab_axis);
    saved.columns[static_cast<std::size_t>(r)] = {cols.begin, cols.valid()};
    saved.labels[static_cast<std::size_t>(r)] = frame_labels(
        labels, ids, token_frame(y.global, y.layout, mesh, r, labels, batch_axis, batch_begin));
  });
}

// y: the logits (global [tokens..., vocab]); ids: the labels' global values, of shape `labels`
// (the whole step's batch). Returns the scalar loss, Replicate.
template <typename T>
DistTensor<T> cross_entropy_sharded(const World<T>& world, const DistTensor<T>& y,
                                    const Shape& labels, const std::vector<std::int64_t>& ids,
                                    const std::string& vocab_axis, const std::string& batch_axis,
                                    const CrossEntropyParams& params,
                                    const CrossEntropyFaults& faults, const std::string& output,
                                    const CrossEntropyMicro& micro, CrossEntropySaved<T>& saved) {
  namespace parts = cross_entropy_parts;
  const int dv = vocab_dim(y.layout, vocab_axis);
  const Shape tokens = y.global.without(vocab_axis);
  Layout token_layout = y.layout;
  if (dv >= 0) token_layout.dims[static_cast<std::size_t>(dv)] = Placement::replicate();
  const std::size_t ranks = static_cast<std::size_t>(world.size());
  ce_rank_tokens(world, y, labels, ids, vocab_axis, batch_axis, micro.batch_begin, saved);
  const bool with_pad = faults.padding_in_softmax;
  const std::vector<std::string> from_logits{y.name};
  auto vocab_label = [&](std::string_view part, bool exact) {
    return BoundaryLabel{.op = "all_reduce",
                         .tensor = part_name(output, part),
                         .exact = exact,
                         .inputs = from_logits};
  };

  // 1. The maximum.
  DistTensor<T> max =
      ce_max_sharded(world, y, dv, tokens, token_layout, with_pad, faults.local_max, output, saved);

  // 2-4. The sums over the vocabulary: Partial on its dim, then all-reduced.
  const Layout sums_layout =
      dv < 0 ? token_layout : token_layout.with(dv, Placement::partial());
  auto vocab_sum = [&](std::string_view part, bool exact, auto&& fill) {
    DistTensor<T> t = world.make(part_name(output, part), tokens, sums_layout);
    world.for_each_rank([&](int r) { fill(r, t.local(r)); });
    if (dv >= 0) return world.on(dv).all_reduce(t, vocab_label(part, exact));
    world.compare_boundary({.op = op_label(OpKind::cross_entropy),
                            .tensor = t.name,
                            .exact = true,
                            .inputs = {y.name, max.name}},
                           t);
    return t;
  };
  const DistTensor<T> sumexp = vocab_sum(parts::sumexp, false, [&](int r, Tensor<T>& out) {
    ce_row_sumexp(y.local(r), saved.columns[static_cast<std::size_t>(r)], with_pad, max.local(r),
                  out);
  });
  const DistTensor<T> target = vocab_sum(parts::target_logit, true, [&](int r, Tensor<T>& out) {
    ce_row_target(y.local(r), saved.columns[static_cast<std::size_t>(r)],
                  saved.labels[static_cast<std::size_t>(r)], params, faults.target_every_rank,
                  out);
  });
  DistTensor<T> logit_sum;
  if (params.label_smoothing > 0) {
    logit_sum = vocab_sum(parts::logit_sum, false, [&](int r, Tensor<T>& out) {
      ce_row_sum(y.local(r), saved.columns[static_cast<std::size_t>(r)], out);
    });
  }

  // 5. lse and each token's loss, on every rank alike.
  DistTensor<T> lse = world.make(part_name(output, parts::lse), tokens, token_layout);
  std::vector<Tensor<T>> token_loss(ranks);
  world.for_each_rank([&](int r) {
    const std::size_t i = static_cast<std::size_t>(r);
    token_loss[i] = Tensor<T>(lse.local(r).shape());
    ce_token_loss(max.local(r), sumexp.local(r), target.local(r),
                  params.label_smoothing > 0 ? logit_sum.local(r) : target.local(r),
                  saved.labels[i], params, lse.local(r), token_loss[i]);
  });
  world.compare_boundary({.op = op_label(OpKind::cross_entropy),
                          .tensor = lse.name,
                          .exact = dv < 0,
                          .inputs = {max.name, sumexp.name}},
                         lse);

  DistTensor<T> loss = ce_reduce_tokens(world, y, dv, labels, ids, batch_axis, params, faults, output,
                                        micro, token_loss, {lse.name, target.name}, saved);
  saved.max = std::move(max);
  saved.sumexp = sumexp;
  saved.lse = std::move(lse);
  return loss;
}

// grad(logits), laid out as the logits: each rank's columns from the saved parts.
template <typename T>
DistTensor<T> cross_entropy_backward_sharded(const World<T>& world, const DistTensor<T>& y,
                                             const CrossEntropyParams& params,
                                             const CrossEntropyFaults& faults,
                                             const CrossEntropySaved<T>& saved,
                                             const std::string& output) {
  DistTensor<T> dy = world.make(output, y.global, y.layout);
  world.for_each_rank([&](int r) {
    const std::size_t i = static_cast<std::size_t>(r);
    ce_backward(y.local(r), saved.columns[i], saved.labels[i], saved.max.local(r),
                saved.sumexp.local(r), saved.lse.local(r), params, faults.padding_in_softmax,
                saved.divisor[i], dy.local(r));
  });
  zero_padding(dy);
  return dy;
}

}  // namespace shardsim
