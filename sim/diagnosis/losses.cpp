// loss_weighting: the masked MSE's sum, count and loss recomputed under other token weightings.
#include <algorithm>
#include <cmath>
#include <functional>

#include "diagnosis/signatures.hpp"
#include "diagnosis/format.hpp"

namespace shardsim {

namespace {

using diag::num;

// Per token (b, s): the squared error summed over every other axis, the token's rank, and
// whether the specified mask counts it.
struct Tokens {
  std::int64_t batch = 0, seq = 0;
  std::vector<double> error;  // b * seq + s
  std::vector<int> rank;
  std::vector<std::int64_t> token_of;  // per element of y: its token b * seq + s
  int ranks = 1;
};

Tokens tokens_of(const LossCase& c) {
  const Shape& shape = c.y->entry.global;
  Tokens t;
  t.batch = shape.extent(c.batch_axis);
  t.seq = shape.extent(c.seq_axis);
  t.ranks = static_cast<int>(c.y->ranks.size());
  t.error.assign(static_cast<std::size_t>(t.batch * t.seq), 0.0);
  t.rank.assign(t.error.size(), 0);
  const std::size_t b_at = shape.position(c.batch_axis), s_at = shape.position(c.seq_axis);
  for (std::int64_t e = 0; e < shape.numel(); ++e) {
    const std::vector<std::int64_t> index = unflatten(shape, e);
    const double diff =
        c.y->dense[static_cast<std::size_t>(e)] - c.target->dense[static_cast<std::size_t>(e)];
    t.token_of.push_back(index[b_at] * t.seq + index[s_at]);
    t.error[static_cast<std::size_t>(t.token_of.back())] += diff * diff;
  }
  for (const Held& h : held_elements(*c.y)) {
    const std::vector<std::int64_t> index = unflatten(shape, h.global);
    t.rank[static_cast<std::size_t>(index[b_at] * t.seq + index[s_at])] = h.rank;
  }
  return t;
}

// What a weighting predicts for the three outputs, and per token the factor of 2 (y - target)
// in the gradient.
struct Prediction {
  std::string text;
  Cause cause;
  double sum = 0, count = 0, loss = 0;
  std::vector<double> weight;
};

using Mask = std::function<bool(std::int64_t b, std::int64_t s)>;

Prediction masked(const Tokens& t, const Mask& valid, std::string text, Cause cause) {
  Prediction p{std::move(text), cause};
  p.weight.assign(t.error.size(), 0.0);
  for (std::int64_t b = 0; b < t.batch; ++b) {
    for (std::int64_t s = 0; s < t.seq; ++s) {
      if (!valid(b, s)) continue;
      p.sum += t.error[static_cast<std::size_t>(b * t.seq + s)];
      p.count += 1;
      p.weight[static_cast<std::size_t>(b * t.seq + s)] = 1;
    }
  }
  p.loss = p.sum / p.count;
  for (double& w : p.weight) w /= p.count;
  return p;
}

std::vector<Prediction> weightings(const LossCase& c, const Tokens& t, Prediction& spec) {
  const auto& lengths = c.valid_lengths;
  auto valid = [&](std::int64_t b, std::int64_t s) {
    return lengths.empty() || s < lengths[static_cast<std::size_t>(b)];
  };
  spec = masked(t, valid, "the specified mask", Cause::wrong_divisor);
  std::vector<Prediction> out;
  out.push_back(masked(
      t, [](std::int64_t, std::int64_t) { return true; },
      "every token, the " +
          std::to_string(t.batch * t.seq - static_cast<std::int64_t>(spec.count)) +
          " padding tokens included",
      Cause::padding_not_masked));
  // The mask built [seq, batch] and read as [batch, seq]: token t = b S + s gets (t / B, t % B).
  out.push_back(masked(
      t,
      [&](std::int64_t b, std::int64_t s) {
        const std::int64_t flat = b * t.seq + s;
        return valid(flat % t.batch, flat / t.batch);
      },
      "the padding mask laid out [" + c.seq_axis + ", " + c.batch_axis + "] and read as [" +
          c.batch_axis + ", " + c.seq_axis + "]",
      Cause::axis_order));
  // Each rank's own mean, summed (the all-reduced sum) and averaged over the ranks.
  Prediction means{"each rank's own mean (sum / its own valid count), averaged over the ranks",
                   Cause::wrong_divisor,
                   0,
                   spec.count,
                   0,
                   std::vector<double>(t.error.size(), 0.0)};
  for (int r = 0; r < t.ranks; ++r) {
    Prediction mine = masked(
        t,
        [&](std::int64_t b, std::int64_t s) {
          return valid(b, s) && t.rank[static_cast<std::size_t>(b * t.seq + s)] == r;
        },
        "", Cause::wrong_divisor);
    if (mine.count == 0) continue;
    means.sum += mine.sum / mine.count;
    for (std::size_t i = 0; i < mine.weight.size(); ++i)
      means.weight[i] += mine.weight[i] / t.ranks;
  }
  means.loss = means.sum / t.ranks;
  out.push_back(means);
  Prediction twice{
      "the valid tokens, divided by the number of ranks (" + std::to_string(t.ranks) + ") as well",
      Cause::wrong_divisor,
      spec.sum,
      spec.count,
      spec.loss / t.ranks,
      spec.weight};
  for (double& w : twice.weight) w /= t.ranks;
  out.push_back(twice);
  Prediction summed{"the valid tokens, summed and never divided by their count",
                    Cause::wrong_divisor,
                    spec.sum,
                    spec.count,
                    spec.sum,
                    spec.weight};
  for (double& w : summed.weight) w *= spec.count;
  out.push_back(summed);
  return out;
}

double misfit(const Observed* o, double predicted) {
  if (!o) return 0;
  double worst = 0;
  for (const Held& h : held_elements(*o)) worst = std::max(worst, diag::rel(h.sharded, predicted));
  return worst;
}

// The gradient's normwise residual: grad(y) = 2 (y - target) * weight[token].
double grad_misfit(const LossCase& c, const Tokens& t, const Prediction& p) {
  if (!c.grad) return 0;
  double scale = 0, worst = 0;
  for (const Held& h : held_elements(*c.grad)) {
    const auto e = static_cast<std::size_t>(h.global);
    const double predicted = 2 * (c.y->dense[e] - c.target->dense[e]) *
                             p.weight[static_cast<std::size_t>(t.token_of[e])];
    scale = std::max(scale, std::fabs(predicted));
    worst = std::max(worst, std::fabs(h.sharded - predicted));
  }
  return scale > 0 ? worst / scale : worst;
}

}  // namespace

Finding loss_weighting(const LossCase& c, double unit) {
  Finding f{.signature = "loss_weighting", .cause = Cause::padding_not_masked};
  if (!c.y || !c.target || c.y->dense.empty() || c.target->dense.size() != c.y->dense.size() ||
      !c.y->entry.global.has(c.batch_axis) || !c.y->entry.global.has(c.seq_axis) ||
      (c.grad && c.grad->dense.size() != c.y->dense.size()) ||
      (!c.valid_lengths.empty() && static_cast<std::int64_t>(c.valid_lengths.size()) !=
                                       c.y->entry.global.extent(c.batch_axis)) ||
      (!c.sum && !c.count && !c.loss && !c.grad)) {
    f.evidence = "n/a: not a failing masked-loss output with its inputs";
    return f;
  }
  const Tokens t = tokens_of(c);
  Prediction spec;
  const std::vector<Prediction> options = weightings(c, t, spec);
  auto worst = [&](const Prediction& p) {
    return std::max({misfit(c.sum, p.sum), misfit(c.count, p.count), misfit(c.loss, p.loss),
                     grad_misfit(c, t, p)});
  };
  const double off = worst(spec);
  std::string outputs;
  for (const Observed* o : {c.sum, c.count, c.loss, c.grad}) {
    if (o) outputs += (outputs.empty() ? "" : ", ") + o->entry.tensor;
  }
  if (off <= kFitUlps * unit) {
    f.evidence =
        "the specified weighting reproduces " + outputs + " within rounding (" + num(off) + ")";
    return f;
  }
  for (const Prediction& p : options) {
    const double fit = worst(p);
    if (fit > kFitUlps * unit || fit * 16 > off) continue;
    f.cause = p.cause;
    f.confidence = 0.95;
    f.evidence = "recomputed over " + p.text + ", the loss reproduces " + outputs + " (residual " +
                 num(fit) + "); the specified weighting (" +
                 std::to_string(static_cast<std::int64_t>(spec.count)) + " valid tokens) is " +
                 num(off) + " away";
    return f;
  }
  f.evidence =
      "no other token weighting reproduces " + outputs + " (specified: " + num(off) + " away)";
  return f;
}

}  // namespace shardsim
