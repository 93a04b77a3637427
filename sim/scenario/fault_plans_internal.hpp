// Private to Loader::fault_plans (fault_plans.cpp and the rule files beside it): what a rule
// asks of a scenario's layouts and steps.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "scenario/scenario.hpp"

namespace shardsim::fault_plans {

// Tensor `name`'s global shape and layout (declared, or a step's output as the loader inferred
// it); null when unknown.
inline const Scenario::TensorLayout* layout_of(const Scenario& s, const std::string& name) {
  const auto found = s.tensor_layouts.find(name);
  return found == s.tensor_layouts.end() ? nullptr : &found->second;
}

// The placement of tensor `name` on the step's mesh dim (Replicate when unknown).
inline Placement on_step_dim(const Scenario& s, const StepSpec& step, const std::string& name) {
  const Scenario::TensorLayout* t = layout_of(s, name);
  if (t == nullptr || step.mesh_dim >= t->layout.ndim()) return Placement::replicate();
  return t->layout.on(step.mesh_dim);
}

// Whether some mesh dim of more than one rank shards tensor `name`.
inline bool sharded_somewhere(const Scenario& s, const std::string& name) {
  const Scenario::TensorLayout* t = layout_of(s, name);
  if (t == nullptr) return false;
  for (int d = 0; d < t->layout.ndim() && d < s.mesh.devices.ndim(); ++d) {
    if (t->layout.on(d).is_shard() && s.mesh.devices.dim(d).size > 1) return true;
  }
  return false;
}

// The slices of `name`'s axis sharded on mesh dim `d`, as if no other dim sharded that axis;
// empty when the tensor is not Shard on `d` or `d` has one rank.
inline std::vector<Slice> slices_on(const Scenario& s, const std::string& name, int d) {
  const Scenario::TensorLayout* t = layout_of(s, name);
  if (t == nullptr || d >= t->layout.ndim() || d >= s.mesh.devices.ndim()) return {};
  const Placement& p = t->layout.on(d);
  const int ranks = s.mesh.devices.dim(d).size;
  if (!p.is_shard() || ranks < 2 || !t->shape.has(p.axis)) return {};
  return shard_slices(t->shape.extent(p.axis), ranks, p.split);
}

// Whether two or more of `slices` hold positions (the others are empty: 3 over 4 ranks gives
// 1, 1, 1, 0; 1 over 4 gives one holder).
inline bool two_or_more_hold(const std::vector<Slice>& slices) {
  return std::count_if(slices.begin(), slices.end(),
                       [](const Slice& slice) { return slice.valid() > 0; }) >= 2;
}

// Whether some mesh dim splits tensor `name` between two or more ranks that each hold part of
// it. When none does, every rank holding any of it holds all of it (a Shard of an extent-1 axis
// over four ranks leaves three empty), so its local indices are the global ones.
inline bool split_between_ranks(const Scenario& s, const std::string& name) {
  const Scenario::TensorLayout* t = layout_of(s, name);
  if (t == nullptr) return false;
  for (int d = 0; d < t->layout.ndim() && d < s.mesh.devices.ndim(); ++d) {
    if (two_or_more_hold(slices_on(s, name, d))) return true;
  }
  return false;
}

// Whether another mesh dim than `d` shards the same axis of `name` as `d` does (the pieces
// then nest, and slices_on is only an outer bound).
inline bool axis_sharded_elsewhere(const Scenario& s, const std::string& name, int d) {
  const Scenario::TensorLayout* t = layout_of(s, name);
  if (t == nullptr || d >= t->layout.ndim()) return false;
  for (int e = 0; e < t->layout.ndim(); ++e) {
    if (e != d && t->layout.on(e).is_shard() && t->layout.on(e).axis == t->layout.on(d).axis) {
      return true;
    }
  }
  return false;
}

// Whether two or more ranks of the step's dim hold a piece of `name`'s axis sharded there
// (always true when another dim shards that axis too: judged only where the split is simple).
inline bool pieces_on_step_dim(const Scenario& s, const StepSpec& step, const std::string& name) {
  if (axis_sharded_elsewhere(s, name, step.mesh_dim)) return true;
  return two_or_more_hold(slices_on(s, name, step.mesh_dim));
}

template <typename Args, typename Pred>
bool any_step(const Scenario& s, OpKind kind, Pred pred) {
  return std::any_of(s.steps.begin(), s.steps.end(), [&](const StepSpec& step) {
    return step.kind == kind && pred(step, step.as<Args>());
  });
}

// The attention rules (fault_plans_attention.cpp) and the gradient-reduction rules
// (fault_plans_grad.cpp): why `fault` would change nothing this scenario runs, or "" when it
// changes something or is not theirs.
std::string attention_effect(Fault fault, const Scenario& s);
std::string grad_reduce_effect(Fault fault, const Scenario& s);
// fault_plans_lm.cpp: tied_grad_one_use, the AdamW and the GQA faults.
std::string tied_effect(Fault fault, const Scenario& s);
std::string optimizer_effect(Fault fault, const Scenario& s);
std::string gqa_effect(Fault fault, const Scenario& s);

}  // namespace shardsim::fault_plans
