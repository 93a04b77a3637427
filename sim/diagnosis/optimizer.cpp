// The optimizer signature: at a failing AdamW boundary (the parameter, or its exp_avg or
// exp_avg_sq), the update recomputed in double from the oracle's inputs under the usual variants
// of the rule, and the variant the ranks' values follow named (signatures.hpp, adamw_variants).
#include <algorithm>
#include <cmath>

#include "diagnosis/context.hpp"
#include "diagnosis/format.hpp"

namespace shardsim::diag {

namespace {

// The inputs of one AdamW update in double: before it, the parameter and moments (zeros at
// t = 1); the reduced gradient; the update count.
struct AdamWInputs {
  std::vector<double> param, grad, exp_avg, exp_avg_sq;
  std::int64_t t = 1;
};

enum class Output { param, exp_avg, exp_avg_sq };

// The values of `name` at the latest boundary of an earlier training step than `id`'s.
const Observed* before_step(Context& ctx, const std::string& name, int id) {
  for (int b = id - 1; b >= 0; --b) {
    const BoundaryResult& r = ctx.result(b);
    if (r.entry.step < ctx.entry(id).step && r.entry.tensor == name && r.captured &&
        r.captured->has_dense) {
      return &ctx.observed(b);
    }
  }
  return nullptr;
}

// One variant's output, elementwise in double (ops/adamw.hpp's order).
std::vector<double> variant(const AdamWInputs& in, const Scenario::Optimizer& o, double lr,
                            const AdamWVariant& v, Output out) {
  const double t = static_cast<double>(in.t + v.step_shift);
  const double bc1 = v.bias_correction ? 1 - std::pow(o.beta1, t) : 1;
  const double bc2 = v.bias_correction ? 1 - std::pow(o.beta2, t) : 1;
  std::vector<double> result(in.param.size());
  for (std::size_t i = 0; i < result.size(); ++i) {
    const double g = v.coupled_decay ? in.grad[i] + o.weight_decay * in.param[i] : in.grad[i];
    const double p = v.coupled_decay ? in.param[i] : in.param[i] * (1 - lr * o.weight_decay);
    const double m = in.exp_avg[i] * o.beta1 + (1 - o.beta1) * g;
    const double s = in.exp_avg_sq[i] * o.beta2 + (1 - o.beta2) * g * g;
    const double denom =
        v.eps_inside_sqrt ? std::sqrt(s / bc2 + o.eps) : std::sqrt(s) / std::sqrt(bc2) + o.eps;
    result[i] = out == Output::param ? p - lr / bc1 * (m / denom)
                : out == Output::exp_avg ? m
                                         : s;
  }
  return result;
}

}  // namespace

const std::vector<AdamWVariant>& adamw_variants() {
  static const std::vector<AdamWVariant> variants{
      {"the AdamW update without bias correction (raw moments)", false, false, false, 0},
      {"Adam with L2: weight_decay * param added to the gradient instead of decoupled decay", true,
       true, false, 0},
      {"the bias correction of the next update count (t + 1: the step counter advanced twice)",
       true, false, false, 1},
      {"eps inside the square root, sqrt(v_hat + eps)", true, false, true, 0}};
  return variants;
}

Finding optimizer_signature(Context& ctx, int id) {
  Finding f{.signature = "adamw_update", .cause = Cause::optimizer_convention};
  const TraceEntry& e = ctx.entry(id);
  const Scenario& s = ctx.scenario();
  if (e.op != "adamw" || !s.adamw() || s.micro_batches > 1) {
    f.evidence = "n/a: not an AdamW update without micro-batches";
    return f;
  }
  Output out = Output::param;
  std::string name = e.tensor;
  for (const auto& [suffix, which] : {std::pair{".exp_avg_sq", Output::exp_avg_sq},
                                      std::pair{".exp_avg", Output::exp_avg}}) {
    if (name.ends_with(suffix)) {
      name.resize(name.size() - std::string_view(suffix).size());
      out = which;
      break;
    }
  }
  const auto param = ctx.latest(name, id - 1);
  const auto grad = ctx.latest(grad_name(name), id);
  if (!param || !grad) {
    f.evidence = "n/a: the parameter or its gradient before the update was not captured";
    return f;
  }
  AdamWInputs in{ctx.observed(*param).dense, ctx.observed(*grad).dense, {}, {}, e.step};
  for (auto [part, values] : {std::pair{"exp_avg", &in.exp_avg},
                              std::pair{"exp_avg_sq", &in.exp_avg_sq}}) {
    const Observed* earlier = before_step(ctx, part_name(name, part), id);
    *values = earlier ? earlier->dense : std::vector<double>(in.param.size(), 0.0);
  }
  const Observed& o = ctx.observed(id);
  if (in.grad.size() != in.param.size() || in.exp_avg.size() != in.param.size() ||
      in.exp_avg_sq.size() != in.param.size() || o.dense.size() != in.param.size()) {
    f.evidence = "n/a: the update's inputs were not captured whole";
    return f;
  }
  // Recomputed in double from rounded inputs: a variant fits within 2^12 units of the analysed
  // run's rounding (docs/diagnosis.md's rule for every recomputed alternative), and the correct
  // update's gap (the failure) is 16 times that or more.
  const double fit = 4096 * ctx.unit();
  const double correct = normwise_gap_to(o, variant(in, s.optimizer, s.learning_rate, {}, out));
  for (const AdamWVariant& v : adamw_variants()) {
    const double gap = normwise_gap_to(o, variant(in, s.optimizer, s.learning_rate, v, out));
    if (gap <= fit && correct > 16 * fit) {
      f.confidence = 0.9;
      f.evidence = "the ranks' values are " + v.what + " (gap " + num(gap) +
                   "; the correct update's " + num(correct) + ")";
      return f;
    }
  }
  f.evidence = "no AdamW variant fits (the correct update's gap " + num(correct) + ")";
  return f;
}

}  // namespace shardsim::diag
