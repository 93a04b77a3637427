// Private to the runner: the seeded faults that live in the training loop rather than in an
// op's plan (fault_list.hpp). Like every fault, they change the sharded program only.
//   ones_init_assumed       the sharded program re-initializes a parameter that a step names as
//                           its weight to ones and as its bias to zeros, trusting default init
//                           instead of the loaded values;
//   unreduced_param_grads   each replica of a Replicate parameter steps with its own rank's
//                           Partial gradient, skipping the all-reduce.
#pragma once

#include <optional>
#include <string>

#include "shardsim/scenario/scenario.hpp"
#include "shardsim/world.hpp"

namespace shardsim {

// The default init a plan that trusts it would assume for parameter `name`: 1 when some step
// names it as its `weight`, 0 as its `bias`, none otherwise. The first step that names it
// decides.
inline std::optional<double> assumed_default_init(const Scenario& scenario,
                                                  const std::string& name) {
  for (const StepSpec& step : scenario.steps) {
    if (step.has("weight") && step.str("weight") == name) return 1.0;
    if (step.has("bias") && step.str("bias") == name) return 0.0;
  }
  return std::nullopt;
}

// ones_init_assumed: overwrites the ranks' copies of parameter `spec` (already laid out) and
// records the overwritten values as an input boundary. No-op when the fault is off or the
// parameter is neither a weight nor a bias.
template <typename T>
void apply_ones_init_assumed(const Scenario& scenario, const TensorSpec& spec,
                             const World<T>& world, DistTensor<T>& param) {
  if (!scenario.has_fault(Fault::ones_init_assumed) || spec.role != TensorRole::parameter) return;
  const std::optional<double> value = assumed_default_init(scenario, spec.name);
  if (!value) return;
  world.for_each_rank([&](int r) {
    for (T& v : param.local(r).values()) v = T(*value);
  });
  zero_padding(param);
  world.compare_boundary({.op = "assumed_init",
                          .tensor = spec.name,
                          .exact = true,
                          .kind = BoundaryKind::input,
                          .inputs = {spec.name}},
                         param);
}

// unreduced_param_grads: whether the update of `param` must skip the all-reduce of its Partial
// gradient on every dim (each replica then steps with its own rank's addend).
template <typename T>
bool skips_gradient_reduce(const Scenario& scenario, const DistTensor<T>& grad,
                           const DistTensor<T>& param) {
  if (!scenario.has_fault(Fault::unreduced_param_grads)) return false;
  for (int d = 0; d < grad.layout.ndim(); ++d) {
    if (grad.layout.on(d).is_partial() && param.layout.on(d).is_replicate()) return true;
  }
  return false;
}

}  // namespace shardsim
