// embedding: schema and shape/placement rules, and the check of every id.
#include "scenario/op_entry.hpp"

namespace shardsim {

namespace {

// The ids: an i64 tensor, Replicate or Shard of one of its axes on every dim (Replicate on the
// weight's vocabulary dim). The weight [vocab, hidden]: Replicate on every dim but the step's,
// where it is Replicate or Shard(vocab) (vocab-parallel). `to` (vocab-parallel only): Replicate or
// Shard of a token axis. Every id is a row of the weight.
void embedding_rules(const EmbeddingArgs& args, const StepSpec& step, StepContext& ctx) {
  const TensorState& ids = ctx.ids(step, "input");
  const TensorState& weight = ctx.tensor(step, "weight");
  const std::string& weight_name = step.str("weight");
  if (weight.shape.rank() != 2) {
    ctx.fail(step, "weight",
             quote(weight_name) + " must be [vocab, hidden], got " + weight.shape.str());
  }
  const std::string vocab = weight.shape[0].name;
  const std::string hidden = weight.shape[1].name;
  if (ids.shape.has(hidden)) {
    ctx.fail(step, "weight",
             "the ids " + quote(step.str("input")) + " " + ids.shape.str() +
                 " already have an axis " + quote(hidden) + ", the weight's second axis");
  }
  ctx.require_replicate_elsewhere(step, "weight", weight);
  const Placement& on = weight.placement(step);
  const bool vocab_parallel = on.is_shard();
  if (on.is_partial() || (on.is_shard() && on.axis != vocab)) {
    ctx.fail(step, "weight",
             quote(weight_name) + " must be Replicate or Shard(" + vocab +
                 ") on the step's dim, not " + on.str());
  }
  if (on.is_shard() && on.split == SplitPolicy::zigzag) {
    ctx.fail(step, "weight", "the vocabulary cannot be split zigzag");
  }
  for (int d = 0; d < ids.layout.ndim(); ++d) {
    const Placement& p = ids.layout.on(d);
    if (p.is_partial() || (d == step.mesh_dim && vocab_parallel && !p.is_replicate())) {
      ctx.fail(step, "input",
               "the ids must be Replicate" +
                   std::string(vocab_parallel ? " on the vocabulary's dim" : "") +
                   " and Replicate or Shard of a token axis elsewhere, not " + ids.layout.str());
    }
  }
  Layout out = ids.layout;
  if (!args.to.is_replicate()) {
    if (!vocab_parallel) {
      ctx.fail(step, "to",
               "to = " + quote(args.to.str()) + " scatters a vocab-parallel lookup, but " +
                   quote(weight_name) + " is not Shard(" + vocab + ") on the step's dim");
    }
    if (!args.to.is_shard() || !ids.shape.has(args.to.axis)) {
      ctx.fail(step, "to",
               "to must be Replicate or Shard(AXIS) of a token axis of " + ids.shape.str() +
                   ", got " + args.to.str());
    }
    out = out.with(step.mesh_dim, args.to);
  }
  const std::int64_t rows = weight.shape[0].extent;
  const std::vector<std::int64_t>& values = *ids.ids;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (values[i] >= 0 && values[i] < rows) continue;
    std::int64_t flat = static_cast<std::int64_t>(i);
    std::vector<std::int64_t> index(ids.shape.rank());
    for (std::size_t a = ids.shape.rank(); a-- > 0;) {
      index[a] = flat % ids.shape[a].extent;
      flat /= ids.shape[a].extent;
    }
    std::string where = "[";
    for (std::size_t a = 0; a < index.size(); ++a) {
      where += (a ? ", " : "") + std::to_string(index[a]);
    }
    ctx.fail(step, "input",
             "element " + where + "] of " + quote(step.str("input")) + " is " +
                 std::to_string(values[i]) + ": a token id is a row of " + quote(weight_name) +
                 ", in [0, " + std::to_string(rows) + ")");
  }
  std::vector<Axis> axes = ids.shape.axes();
  axes.push_back(weight.shape[1]);
  ctx.define(step, "output", {Shape(std::move(axes)), out});
}

}  // namespace

template <>
OpEntry op_entry<OpKind::embedding>() {
  using A = EmbeddingArgs;
  return OpEntryBuilder<A>(OpKind::embedding,
                           "token embedding: y[t] = weight[id_t] (nn.Embedding); vocab-parallel "
                           "when the weight is Shard(vocab): masked lookups, then an all-reduce "
                           "or a reduce-scatter (Megatron's VocabParallelEmbedding)")
      .tensor("input", &A::input, "the token ids: an i64 tensor (dtype = \"i64\")")
      .tensor("weight", &A::weight, "[vocab, hidden]: Replicate, or Shard(vocab) on the step's dim")
      .output("output", &A::output, "[ids' axes..., hidden]")
      .placement("to", &A::to,
                 "vocab-parallel only: Replicate (all-reduce, the default) or Shard(AXIS) of a "
                 "token axis (reduce-scatter: sequence parallelism)",
                 false)
      .text("batch_axis", &A::batch_axis,
            "the axis micro-batches and --oracle distributed cut; default batch")
      .rules(embedding_rules)
      .build();
}

}  // namespace shardsim
