// The gradient-reduction faults' rule of Loader::fault_plans (fault_plans.cpp lists them all):
// unreduced_param_grads, grad_reduce_mean and grad_reduce_wrong_dim change the all-reduce of a
// Replicate parameter's Partial gradient, which needs a dim whose ranks saw different data.
#include <algorithm>
#include <string>

#include "scenario/scenario.hpp"
#include "scenario/fault_plans_internal.hpp"

namespace shardsim::fault_plans {

namespace {

// Whether the ranks of mesh dim `d` (two or more) hold different data there: some tensor of the
// scenario, declared or a step's output as the loader inferred it, is not Replicate on `d`.
bool data_split_on(const Scenario& s, int d) {
  if (s.mesh.devices.dim(d).size < 2) return false;
  return std::any_of(s.tensor_layouts.begin(), s.tensor_layouts.end(), [&](const auto& entry) {
    const Layout& layout = entry.second.layout;
    return d < layout.ndim() && !layout.on(d).is_replicate();
  });
}

}  // namespace

// The gradient-reduction faults (runner_faults.hpp). Each changes the all-reduce that turns a
// parameter's Partial gradient on a dim where the parameter is Replicate into the sum. Such a
// gradient needs ranks of that dim that saw different data: when every tensor is Replicate on
// every dim where a parameter is Replicate, every rank computes the whole gradient itself
// (attention with replicated queries splits its keys inside the plan and gathers them back
// before the weights' gradients), there is no such all-reduce, and the fault changes nothing.
// grad_reduce_wrong_dim also needs another dim where that parameter is Replicate to reduce over
// instead.
std::string grad_reduce_effect(Fault fault, const Scenario& s) {
  if (fault != Fault::unreduced_param_grads && fault != Fault::grad_reduce_mean &&
      fault != Fault::grad_reduce_wrong_dim) {
    return "";
  }
  const int dims = s.mesh.devices.ndim();
  for (int d = 0; d < dims; ++d) {
    if (!data_split_on(s, d)) continue;
    for (const TensorSpec& t : s.tensors) {
      if (t.role != TensorRole::parameter || d >= t.layout.ndim() ||
          !t.layout.on(d).is_replicate()) {
        continue;
      }
      if (fault != Fault::grad_reduce_wrong_dim) return "";
      for (int other = 0; other < dims && other < t.layout.ndim(); ++other) {
        if (other != d && t.layout.on(other).is_replicate()) return "";
      }
    }
  }
  return fault == Fault::grad_reduce_wrong_dim
             ? "it reduces a parameter's Partial gradient over another dim where the parameter is "
               "Replicate, and no parameter here is Replicate on a dim whose ranks hold "
               "different data (some tensor Shard or Partial there) and on a second dim"
             : "it changes the all-reduce of a parameter's Partial gradient, and no parameter here "
               "is Replicate on a dim whose ranks hold different data (some tensor Shard or "
               "Partial there): every rank computes the whole gradient";
}

}  // namespace shardsim::fault_plans
