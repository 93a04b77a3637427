// mse_loss: schema and rules.
#include "scenario/op_entry.hpp"

namespace shardsim {

namespace {

// The prediction and target agree in shape and placement; whole tokens on every rank; one
// valid length per batch element.
void mse_loss_rules(const MseLossArgs& args, const StepSpec& step, StepContext& ctx) {
  const TensorState& input = ctx.tensor(step, "input");
  const TensorState& target = ctx.tensor(step, "target");
  if (!(target.shape == input.shape)) {
    ctx.fail(step, "target",
             "shape mismatch: " + quote(step.str("target")) + " is " + target.shape.str() +
                 " but " + quote(step.str("input")) + " is " + input.shape.str());
  }
  if (!(target.layout == input.layout)) {
    ctx.fail(step, "target",
             "placement mismatch: " + quote(step.str("target")) + " is " + target.layout.str() +
                 " but " + quote(step.str("input")) + " is " + input.layout.str());
  }
  const std::string& batch = args.batch_axis;
  const std::string& seq = args.seq_axis;
  const std::string& feature = args.feature_axis;
  for (const auto& [key, axis] :
       {std::pair{"batch_axis", batch}, {"seq_axis", seq}, {"feature_axis", feature}}) {
    if (!input.shape.has(axis)) {
      ctx.fail(step, key,
               "axis " + quote(axis) + " is not an axis of " + quote(step.str("input")) + " " +
                   input.shape.str());
    }
  }
  if (input.placement(step).is_partial() ||
      (input.placement(step).is_shard() && input.placement(step).axis != batch &&
       input.placement(step).axis != seq)) {
    ctx.fail(step, "input",
             std::string(step.op()) + " needs whole tokens: Replicate or Shard(" + batch +
                 ") or Shard(" + seq + "), not " + input.placement(step).str());
  }
  if (args.valid_lengths) {
    const std::vector<std::int64_t>& lengths = *args.valid_lengths;
    const std::int64_t batch_size = input.shape.extent(batch);
    if (static_cast<std::int64_t>(lengths.size()) != batch_size) {
      ctx.fail(step, "valid_lengths",
               "needs one length per batch element (" + std::to_string(batch_size) + "), got " +
                   std::to_string(lengths.size()));
    }
    std::int64_t total = 0;
    for (std::int64_t n : lengths) {
      if (n < 0 || n > input.shape.extent(seq)) {
        ctx.fail(step, "valid_lengths",
                 "each length must be in [0, " + std::to_string(input.shape.extent(seq)) + "]");
      }
      total += n;
    }
    if (total == 0) ctx.fail(step, "valid_lengths", "at least one token must be valid");
  }
  ctx.define(step, "output",
             {Shape(), Layout::uniform(input.layout.ndim(), Placement::replicate())});
}

}  // namespace

template <>
OpEntry op_entry<OpKind::mse_loss>() {
  using A = MseLossArgs;
  return OpEntryBuilder<A>(OpKind::mse_loss,
                           "masked MSE: sum over valid tokens of sum_h (y - target)^2, divided "
                           "once by the global valid-token count")
      .tensor("input", &A::input, "prediction")
      .tensor("target", &A::target, "target, same shape and placement as input")
      .output("output", &A::output, "name of the scalar loss")
      .integer_list("valid_lengths", &A::valid_lengths,
                    "valid tokens per batch element (token (b, s) is valid iff s < "
                    "valid_lengths[b]); default: all valid")
      .text("batch_axis", &A::batch_axis, "default batch")
      .text("seq_axis", &A::seq_axis, "default seq")
      .text("feature_axis", &A::feature_axis, "default hidden")
      .rules(mse_loss_rules)
      .build();
}

}  // namespace shardsim
