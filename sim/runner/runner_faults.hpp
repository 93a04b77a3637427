// Private to the runner: the seeded faults that live in the training loop rather than in an
// op's plan (fault_list.hpp). Like every fault, they change the sharded program only.
//   ones_init_assumed       the sharded program re-initializes a parameter that a step names as
//                           its weight to ones and as its bias to zeros, trusting default init
//                           instead of the loaded values;
//   unreduced_param_grads   each replica of a Replicate parameter steps with its own rank's
//                           Partial gradient, skipping the all-reduce;
//   grad_reduce_mean        the all-reduce of a Partial gradient averages instead of summing;
//   grad_reduce_wrong_dim   the all-reduce runs over another dim where the parameter is
//                           Replicate (sums identical copies), the Partial dim stays unreduced.
#pragma once

#include <optional>
#include <string>

#include "scenario/scenario.hpp"
#include "core/world.hpp"

namespace shardsim {

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

// The dim the grad_reduce_wrong_dim program reduces instead of `dim`: the first other dim where
// the parameter and the gradient are both Replicate; -1 when there is none.
inline int wrong_reduce_dim(const Layout& grad, const Layout& param, int dim) {
  for (int d = 0; d < param.ndim(); ++d) {
    if (d != dim && param.on(d).is_replicate() && grad.on(d).is_replicate()) return d;
  }
  return -1;
}

// The gradient of parameter `param` moved to the parameter's layout, dim by dim in mesh order,
// with the reduction faults applied (the correct program: world.redistribute to param.layout).
// Each collective is recorded under the gradient's name, compared with the oracle's gradient.
template <typename T>
DistTensor<T> reduce_param_grad(const Scenario& scenario, const World<T>& world, DistTensor<T> grad,
                                const DistTensor<T>& param, const std::string& key) {
  const bool mean = scenario.has_fault(Fault::grad_reduce_mean);
  const bool wrong_dim = scenario.has_fault(Fault::grad_reduce_wrong_dim);
  for (int d = 0; d < param.layout.ndim(); ++d) {
    const Placement& target = param.layout.on(d);
    if (grad.layout.on(d) == target) continue;
    const World<T> group = world.on(d);
    const bool reduces = grad.layout.on(d).is_partial() && target.is_replicate();
    if (reduces && mean) {
      // The bug: average = sum of (addend / k); the all-reduce then records the mean.
      const T size = T(group.group_size());
      world.for_each_rank([&](int r) {
        for (T& v : grad.local(r).values()) v = v / size;
      });
    }
    const int other = reduces && wrong_dim ? wrong_reduce_dim(grad.layout, param.layout, d) : -1;
    if (other >= 0) {
      // The bug: the group of dim `other` all-reduces copies it already shares, and the
      // gradient is then taken as reduced on `d`.
      grad.layout.dims[static_cast<std::size_t>(other)] = Placement::partial();
      grad = world.on(other).redistribute(grad, Placement::replicate(),
                                          {.tensor = key, .inputs = {key}});
      grad.layout.dims[static_cast<std::size_t>(d)] = target;
      continue;
    }
    grad = group.redistribute(grad, target, {.tensor = key, .inputs = {key}});
  }
  return grad;
}

}  // namespace shardsim
