// The parameter update of a training step, and the oracle's finiteness check: members of
// detail::ScenarioRun, included by runner-inl.hpp. Per parameter: its gradient moved to the
// parameter's layout, then SGD on the oracle and on every rank (a narrow run rounds the updated
// values to its storage format), a replica check where a dim replicates it, and the comparison with
// the oracle.
#pragma once

#include <string>
#include <vector>

#include "runner/runner-inl.hpp"

namespace shardsim::detail {

// Per parameter: its gradient moved to the parameter's layout (a Partial dim all-reduced or
// reduce-scattered, in mesh-dim order; under fsdp this happened after its unit's backward),
// then SGD on the oracle and on every rank's local, a replica check where a dim replicates it,
// and the comparison with the oracle. With clip_grad_norm every gradient is reduced first,
// then all are clipped by their global norm (clip.hpp), then the updates run.
template <typename T>
void ScenarioRun<T>::update_parameters() {
  ++updates_;
  std::vector<const TensorSpec*> trained;
  for (const TensorSpec& spec : scenario_.tensors) {
    if (spec.role == TensorRole::parameter && env_.has_grad(spec.name)) trained.push_back(&spec);
  }
  if (!scenario_.clip_grad_norm) {
    for (const TensorSpec* spec : trained) {
      reduce_gradient(*spec);
      step_parameter(*spec);
    }
    return;
  }
  std::vector<std::string> dense_grads;
  std::vector<std::string> sharded_grads;
  for (const TensorSpec* spec : trained) {
    reduce_gradient(*spec);
    dense_grads.push_back(grad_name(spec->name));
    const bool owned = fsdp_.owns(spec->name);
    if (owned && !fsdp_.first_member(spec->name)) continue;
    sharded_grads.push_back(grad_name(owned ? fsdp_.storage_name(spec->name) : spec->name));
  }
  const DistTensor<T> coef =
      clip_gradients(world_, env_, *scenario_.clip_grad_norm, dense_grads, sharded_grads,
                     scenario_.has_fault(Fault::fsdp_clip_padding));
  for (const TensorSpec* spec : trained) step_parameter(*spec, &coef);
}

template <typename T>
void ScenarioRun<T>::reduce_gradient(const TensorSpec& spec) {
  if (fsdp_.owns(spec.name)) return;
  const std::string key = grad_name(spec.name);
  DistTensor<T>& grad = env_.sharded.at(key);
  const DistTensor<T>& param = env_.sharded.at(spec.name);
  if (skips_gradient_reduce(scenario_, grad, param)) {
    grad.layout = param.layout;
  } else if (!(grad.layout == param.layout)) {
    grad = reduce_param_grad(scenario_, world_, std::move(grad), param, key);
  }
}

// SGD or AdamW of one parameter; under fsdp of its storage (a flat unit once, at its first member).
template <typename T>
void ScenarioRun<T>::step_parameter(const TensorSpec& spec, const DistTensor<T>* clip_coef) {
  std::string name = spec.name;
  std::vector<std::string> members{name};
  DistTensor<T>* param = nullptr;
  if (fsdp_.owns(name)) {
    if (!fsdp_.first_member(name)) return;
    name = fsdp_.storage_name(name);
    members = fsdp_.members(name);
    if (scenario_.has_fault(Fault::fsdp_full_param_step)) {
      fsdp_.step_full_param(name, env_, scenario_.learning_rate, clip_coef);
      return;
    }
    fsdp_.remember_stale(name);
    param = &fsdp_.storage(name);
  } else {
    param = &env_.sharded.at(name);
  }
  const std::string key = grad_name(name);
  const DistTensor<T>& grad = env_.sharded.at(key);
  if (scenario_.adamw()) {
    adamw_parameter(name, members, *param, grad);
  } else {
    for (const std::string& m : members) {
      sgd_update(env_.dense.at(m), env_.dense.at(grad_name(m)), scenario_.learning_rate);
      env_.round_to_storage(env_.dense.at(m));  // the updated parameter is stored
    }
    fsdp_.refresh_dense(name, env_);
    world_.for_each_rank([&](int r) {
      sgd_update(param->local(r), grad.local(r), scenario_.learning_rate);
      env_.round_to_storage(param->local(r));
    });
  }
  if (has_replicate_dim(param->layout)) {
    // The first replica of each group is the reference (gathered to process 0).
    const DistTensor<T> gathered = world_.share(*param, /*to_root=*/true);
    const Tensor<T> reference = process0_ ? first_replicas(gathered) : Tensor<T>();
    emit({.op = "replica_check",
          .tensor = moved_name(name, "replicas"),
          .exact = true,
          .kind = BoundaryKind::check},
         *param, &reference);
  }
  world_.compare_boundary({.op = scenario_.adamw() ? "adamw" : "sgd",
                           .tensor = name,
                           .kind = BoundaryKind::update,
                           .inputs = {name, key}},
                          *param);
}

// AdamW of one parameter (or fsdp storage `name` holding `members`): the oracle steps each
// member with its moments, the ranks step their locals with theirs (held like the parameter,
// zeros before the first update), and each moment is a boundary (NAME.exp_avg, NAME.exp_avg_sq)
// before the parameter's. A narrow run stores the moments in its format, as the parameter.
template <typename T>
void ScenarioRun<T>::adamw_parameter(const std::string& name,
                                     const std::vector<std::string>& members, DistTensor<T>& param,
                                     const DistTensor<T>& grad) {
  const Scenario::Optimizer& o = scenario_.optimizer;
  const AdamWHyper hyper{scenario_.learning_rate, o.beta1, o.beta2, o.eps, o.weight_decay};
  const std::string avg = part_name(name, "exp_avg");
  const std::string avg_sq = part_name(name, "exp_avg_sq");
  const auto zeros_like = [](auto tensor) {
    if constexpr (requires { tensor.locals; }) {
      for (Tensor<T>& local : tensor.locals) local.values().assign(local.values().size(), T(0));
    } else {
      tensor.values().assign(tensor.values().size(), T(0));
    }
    return tensor;
  };
  for (const std::string& m : members) {
    Tensor<T>& p = env_.dense.at(m);
    for (const std::string& part : {part_name(m, "exp_avg"), part_name(m, "exp_avg_sq")}) {
      if (!env_.dense.count(part)) env_.dense.emplace(part, zeros_like(p));
    }
    Tensor<T>& m1 = env_.dense.at(part_name(m, "exp_avg"));
    Tensor<T>& m2 = env_.dense.at(part_name(m, "exp_avg_sq"));
    adamw_step(p, env_.dense.at(grad_name(m)), m1, m2, hyper, updates_);
    for (Tensor<T>* stored : {&p, &m1, &m2}) env_.round_to_storage(*stored);
  }
  fsdp_.refresh_dense(name, env_);
  fsdp_.refresh_dense_part(name, "exp_avg", env_);
  fsdp_.refresh_dense_part(name, "exp_avg_sq", env_);
  for (const std::string& part : {avg, avg_sq}) {
    if (!env_.sharded.count(part)) env_.sharded.emplace(part, zeros_like(param));
  }
  DistTensor<T>& m1 = env_.sharded.at(avg);
  DistTensor<T>& m2 = env_.sharded.at(avg_sq);
  const AdamWFault fault = scenario_.has_fault(Fault::adamw_bias_correction_missing)
                               ? AdamWFault::bias_correction_missing
                           : scenario_.has_fault(Fault::adamw_decay_coupled)
                               ? AdamWFault::decay_coupled
                               : AdamWFault::none;
  world_.for_each_rank([&](int r) {
    adamw_step(param.local(r), grad.local(r), m1.local(r), m2.local(r), hyper, updates_, fault);
    for (Tensor<T>* stored : {&param.local(r), &m1.local(r), &m2.local(r)}) {
      env_.round_to_storage(*stored);
    }
  });
  for (const std::string& part : {avg, avg_sq}) {
    world_.compare_boundary(
        {.op = "adamw", .tensor = part, .kind = BoundaryKind::update, .inputs = {grad_name(name)}},
        env_.sharded.at(part));
  }
}

// A non-finite oracle is no reference: the scenario overflows (or is undefined) at this
// precision, which is bad input (exit 2), not a divergence of the sharded program.
template <typename T>
std::int64_t ScenarioRun<T>::first_not_finite(const Tensor<T>& oracle) {
  using std::isfinite;
  for (std::int64_t i = 0; i < oracle.numel(); ++i) {
    if (!isfinite(oracle[i])) return i;
  }
  return -1;
}

template <typename T>
InputError ScenarioRun<T>::oracle_not_finite(const TraceEntry& entry, const Shape& shape,
                                             std::int64_t flat) const {
  const std::vector<std::int64_t> index = unflatten(shape, flat);
  std::string at;
  for (std::size_t a = 0; a < index.size(); ++a) {
    at += (a ? ", " : "") + shape[a].name + "=" + std::to_string(index[a]);
  }
  return InputError(scenario_.file + ": the oracle is not finite at boundary #" +
                    std::to_string(entry.id) + " (step " + std::to_string(entry.step) + ", chunk " +
                    std::to_string(entry.chunk) + ", " + entry.op + " -> " + entry.tensor +
                    ") in the " + run_name() + " run, first at [" + at +
                    "]: the scenario's values overflow or are undefined at this "
                    "precision, so there is no reference to compare with");
}

template <typename T>
void ScenarioRun<T>::check_oracle_finite(const Tensor<T>& oracle, const TraceEntry& entry) const {
  const std::int64_t flat = first_not_finite(oracle);
  if (flat >= 0) throw oracle_not_finite(entry, oracle.shape(), flat);
}

}  // namespace shardsim::detail
