// Template body of run_scenario. Included by runner.cpp (float, double) and runner_mp.cpp (Mp).
//
// One training step (train_steps = K runs K of them; without it, one forward pass):
//   1. forward: every scenario step, oracle first, then the sharded plan;
//   2. backward (training only): steps in reverse, from the loss;
//   3. parameter gradients: a Partial (per-rank) gradient of a Replicate parameter is
//      all-reduced over the group, its own boundary;
//   4. SGD on the oracle's parameters and on every rank's replica, then a replica-consistency
//      check (all ranks bitwise identical) and a comparison with the oracle.
#pragma once

#include <set>

#include "shardsim/ops/sgd.hpp"
#include "shardsim/runner.hpp"
#include "sim/steps/registry.hpp"

namespace shardsim {

template <typename T>
std::vector<TraceEntry> run_scenario(const Scenario& scenario, const RunOptions& options,
                                     BoundarySink<T>& sink) {
  World<T> world(scenario.mesh.ranks, effective_reduce_order(scenario, options),
                 effective_schedule(scenario, options));
  StepEnv<T> env{scenario, world, {}, {}};
  std::vector<TraceEntry> trace;
  std::set<std::string> identical;  // tensors whose latest boundary matched the oracle bitwise
  int step = 1;
  const int chunk = 1;

  // Reports one boundary; `oracle` overrides the dense counterpart (replica checks).
  auto emit = [&](const BoundaryLabel& label, const DistTensor<T>& tensor,
                  const Tensor<T>* oracle) {
    TraceEntry entry;
    entry.id = static_cast<int>(trace.size());
    entry.step = step;
    entry.chunk = chunk;
    entry.kind = label.kind;
    entry.op = label.op;
    entry.tensor = label.tensor;
    entry.dense = label.dense_name();
    entry.exact = label.exact;
    for (const std::string& input : label.inputs) {
      if (!identical.count(input)) entry.exact = false;
    }
    entry.global = tensor.global;
    entry.placement = tensor.placement;
    entry.ranks = rank_extents(tensor.global, tensor.placement, tensor.ranks());
    if (!oracle) {
      auto found = env.dense.find(entry.dense);
      oracle = found == env.dense.end() ? nullptr : &found->second;
    }
    const bool same = sink.on_boundary(entry, oracle, tensor);
    if (same) {
      identical.insert(label.tensor);
    } else {
      identical.erase(label.tensor);
    }
    trace.push_back(std::move(entry));
    return same;
  };
  world.set_hook([&](const BoundaryLabel& label, const DistTensor<T>& tensor) {
    return emit(label, tensor, nullptr);
  });

  // Inputs and parameters: identical f32-representable values at every precision.
  for (const TensorSpec& spec : scenario.tensors) {
    Tensor<T> global(spec.shape);
    for (std::int64_t i = 0; i < global.numel(); ++i) {
      global[i] = T(init_value(spec.init, spec.init_seed, static_cast<std::uint64_t>(i)));
    }
    DistTensor<T> laid_out = distribute(spec.name, global, spec.placement, world.size());
    env.dense[spec.name] = std::move(global);
    env.sharded[spec.name] = std::move(laid_out);
    world.record({.op = "input", .tensor = spec.name, .exact = true, .kind = "input"},
                 env.sharded[spec.name]);
  }

  std::vector<std::unique_ptr<StepOp<T>>> ops;
  for (const StepSpec& spec : scenario.steps) ops.push_back(make_step_op<T>(spec, scenario));

  const int iterations = std::max(1, scenario.train_steps);
  for (step = 1; step <= iterations; ++step) {
    for (auto it = env.dense.begin(); it != env.dense.end();) {
      it = it->first.starts_with("grad(") ? env.dense.erase(it) : std::next(it);
    }
    for (auto it = env.sharded.begin(); it != env.sharded.end();) {
      it = it->first.starts_with("grad(") ? env.sharded.erase(it) : std::next(it);
    }
    for (auto& op : ops) op->forward(env);
    if (scenario.train_steps == 0) break;

    for (auto it = ops.rbegin(); it != ops.rend(); ++it) (*it)->backward(env);

    for (const TensorSpec& spec : scenario.tensors) {
      if (spec.role != TensorRole::parameter || !env.has_grad(spec.name)) continue;
      const std::string key = grad_name(spec.name);
      DistTensor<T> grad = env.sharded.at(key);
      DistTensor<T>& param = env.sharded.at(spec.name);
      if (grad.placement.is_partial() && param.placement.is_replicate() &&
          scenario.has_fault("unreduced_param_grads")) {
        // The bug: each replica steps with its own rank's share of the gradient.
        grad.placement = Placement::replicate();
      } else if (!(grad.placement == param.placement)) {
        grad = world.redistribute(grad, param.placement, {.tensor = key, .inputs = {key}});
      }
      sgd_update(env.dense.at(spec.name), env.dense.at(key), scenario.learning_rate);
      world.for_each_rank([&](int r) {
        sgd_update(param.local(r), grad.local(r), scenario.learning_rate);
      });
      if (param.placement.is_replicate()) {
        const Tensor<T> reference = param.local(0);
        emit({.op = "replica_check", .tensor = spec.name + "@replicas", .exact = true,
              .kind = "check"},
             param, &reference);
      }
      world.record({.op = "sgd", .tensor = spec.name, .kind = "update",
                    .inputs = {spec.name, key}},
                   param);
    }
  }
  return trace;
}

}  // namespace shardsim
