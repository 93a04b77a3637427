// cross_entropy: schema and shape/placement rules, and the check of every label.
#include "scenario/op_entry.hpp"

namespace shardsim {

namespace {

// The labels' element at flat index `flat` as "[i, j]".
std::string element_str(const Shape& shape, std::int64_t flat) {
  std::vector<std::int64_t> index(shape.rank());
  for (std::size_t a = shape.rank(); a-- > 0;) {
    index[a] = flat % shape[a].extent;
    flat /= shape[a].extent;
  }
  std::string out = "[";
  for (std::size_t a = 0; a < index.size(); ++a) {
    out += (a ? ", " : "") + std::to_string(index[a]);
  }
  return out + "]";
}

// Every label is a class in [0, classes) or ignore_index, and some label is not ignore_index.
void check_labels(const CrossEntropyArgs& args, const StepSpec& step, StepContext& ctx,
                  const TensorState& labels, std::int64_t classes) {
  const std::vector<std::int64_t>& ids = *labels.ids;
  std::int64_t counted = 0;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::int64_t y = ids[i];
    if (y == args.ignore_index) continue;
    if (y < 0 || y >= classes) {
      ctx.fail(step, "labels",
               "element " + element_str(labels.shape, static_cast<std::int64_t>(i)) + " of " +
                   quote(step.str("labels")) + " is " + std::to_string(y) +
                   ": a label is a class in [0, " + std::to_string(classes) +
                   ") or ignore_index (" + std::to_string(args.ignore_index) + ")");
    }
    ++counted;
  }
  if (counted == 0) {
    ctx.fail(step, "labels",
             "every label of " + quote(step.str("labels")) + " is ignore_index (" +
                 std::to_string(args.ignore_index) + "): the mean over no tokens is undefined");
  }
}

// The logits [tokens..., vocab]: the vocabulary the last axis, Shard(vocab) on the step's dim at
// most, Shard of a token axis or Replicate elsewhere. The labels: an i64 tensor of the token axes,
// held as the logits hold their tokens (Replicate where the logits shard the vocabulary), every
// value a class or ignore_index.
void cross_entropy_rules(const CrossEntropyArgs& args, const StepSpec& step, StepContext& ctx) {
  const TensorState& logits = ctx.tensor(step, "input");
  const TensorState& labels = ctx.ids(step, "labels");
  const std::string& vocab = args.vocab_axis;
  const std::string& logits_name = step.str("input");
  if (!logits.shape.has(vocab)) {
    ctx.fail(step, "vocab_axis",
             "axis " + quote(vocab) + " is not an axis of " + quote(logits_name) + " " +
                 logits.shape.str());
  }
  if (logits.shape[logits.shape.rank() - 1].name != vocab) {
    ctx.fail(step, "input",
             "the vocabulary axis " + quote(vocab) + " must be the last axis of " +
                 quote(logits_name) + " " + logits.shape.str());
  }
  const Shape tokens = logits.shape.without(vocab);
  if (tokens.rank() == 0) {
    ctx.fail(step, "input", quote(logits_name) + " has no token axis besides " + quote(vocab));
  }
  if (!(labels.shape == tokens)) {
    ctx.fail(step, "labels",
             "shape mismatch: " + quote(step.str("labels")) + " is " + labels.shape.str() +
                 " but the tokens of " + quote(logits_name) + " are " + tokens.str());
  }
  for (int d = 0; d < logits.layout.ndim(); ++d) {
    const Placement& p = logits.layout.on(d);
    const std::string dim = ctx.mesh ? " on mesh dim " + quote(ctx.mesh->dim(d).name) : "";
    if (p.is_partial()) {
      ctx.fail(step, "input",
               "cross_entropy needs whole logits, not Partial(sum)" + dim +
                   ": reduce them first (a redistribute)");
    }
    if (p.is_shard() && p.axis == vocab) {
      if (d != step.mesh_dim) {
        ctx.fail(step, "input",
                 quote(logits_name) + " shards the vocabulary" + dim +
                     ", but the step runs on another dim: set mesh_dim to the dim that shards "
                     "the vocabulary (its collectives run there)");
      }
      if (p.split == SplitPolicy::zigzag) {
        ctx.fail(step, "input", "the vocabulary cannot be split zigzag (a causal split of a sequence)");
      }
    }
    const Placement& l = labels.layout.on(d);
    const Placement expected = p.is_shard() && p.axis == vocab ? Placement::replicate() : p;
    if (!(l == expected)) {
      ctx.fail(step, "labels",
               "placement mismatch" + dim + ": " + quote(step.str("labels")) + " is " + l.str() +
                   " but the logits' tokens are " + expected.str() +
                   " there (labels are held as the logits hold their tokens, Replicate where "
                   "the vocabulary is sharded)");
    }
  }
  if (!tokens.has(args.batch_axis)) {
    // Only micro-batches and --oracle distributed read it; name a wrong axis early all the same.
    if (step.has("batch_axis")) {
      ctx.fail(step, "batch_axis",
               "axis " + quote(args.batch_axis) + " is not a token axis of " + quote(logits_name) +
                   " " + logits.shape.str());
    }
  }
  check_labels(args, step, ctx, labels, logits.shape.extent(vocab));
  ctx.define(step, "output",
             {Shape(), Layout::uniform(logits.layout.ndim(), Placement::replicate())});
}

}  // namespace

template <>
OpEntry op_entry<OpKind::cross_entropy>() {
  using A = CrossEntropyArgs;
  return OpEntryBuilder<A>(
             OpKind::cross_entropy,
             "cross-entropy over a vocabulary (F.cross_entropy with ignore_index and "
             "label_smoothing, plus PaLM's z-loss), vocab-parallel when the logits are "
             "Shard(vocab); the mean is taken once over the global count of non-ignored tokens")
      .tensor("input", &A::input, "the logits [tokens..., vocab], the vocabulary the last axis")
      .tensor("labels", &A::labels,
              "an i64 tensor (dtype = \"i64\") of the logits' token axes: a class in [0, vocab) "
              "or ignore_index")
      .output("output", &A::output, "name of the scalar loss")
      .integer("ignore_index", &A::ignore_index, false,
               "the label of a token that does not count (default -100, as PyTorch)", {})
      .number("label_smoothing", &A::label_smoothing, false,
              "eps: the target is (1 - eps) one-hot + eps / vocab (PyTorch's definition); "
              "default 0",
              {.low = 0, .high = 1})
      .number("z_loss", &A::z_loss, false, "z: adds z * lse^2 per token (PaLM); default 0",
              {.low = 0, .high = 1e6})
      .text("vocab_axis", &A::vocab_axis, "default vocab")
      .text("batch_axis", &A::batch_axis,
            "the axis micro-batches and --oracle distributed cut; default batch")
      .rules(cross_entropy_rules)
      .build();
}

}  // namespace shardsim
