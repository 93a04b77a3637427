// Template body of run_scenario. Included by runner.cpp (float, double) and runner_mp.cpp (Mp).
#pragma once

#include "shardsim/runner.hpp"
#include "sim/steps/layer_norm_step.hpp"
#include "sim/steps/redistribute_step.hpp"
#include "sim/steps/step_env.hpp"

namespace shardsim {

template <typename T>
std::vector<TraceEntry> run_scenario(const Scenario& scenario, const RunOptions& options,
                                     BoundarySink<T>& sink) {
  World<T> world(scenario.mesh.ranks, effective_reduce_order(scenario, options),
                 effective_schedule(scenario, options));
  std::map<std::string, Tensor<T>> dense;
  std::map<std::string, DistTensor<T>> sharded;
  std::vector<TraceEntry> trace;
  int step = 1;
  int chunk = 1;

  world.set_hook([&](const BoundaryLabel& label, const DistTensor<T>& tensor) {
    TraceEntry entry;
    entry.id = static_cast<int>(trace.size());
    entry.step = step;
    entry.chunk = chunk;
    entry.kind = label.kind;
    entry.op = label.op;
    entry.tensor = label.tensor;
    entry.dense = label.dense_name();
    entry.exact = label.exact;
    entry.global = tensor.global;
    entry.placement = tensor.placement;
    entry.ranks = rank_extents(tensor.global, tensor.placement, tensor.ranks());
    auto found = dense.find(entry.dense);
    sink.on_boundary(entry, found == dense.end() ? nullptr : &found->second, tensor);
    trace.push_back(std::move(entry));
  });

  // Inputs and parameters: identical f32-representable values at every precision.
  for (const TensorSpec& spec : scenario.tensors) {
    Tensor<T> global(spec.shape);
    for (std::int64_t i = 0; i < global.numel(); ++i) {
      global[i] = T(init_value(spec.init, spec.init_seed, static_cast<std::uint64_t>(i)));
    }
    DistTensor<T> laid_out = distribute(spec.name, global, spec.placement, world.size());
    dense[spec.name] = std::move(global);
    world.record({"input", spec.name, "", true, "input"}, laid_out);
    sharded[spec.name] = std::move(laid_out);
  }

  StepEnv<T> env{scenario, world, dense, sharded};
  for (const StepSpec& spec : scenario.steps) {
    if (spec.op == "layer_norm") {
      layer_norm_step(env, spec);
    } else if (spec.op == "redistribute") {
      redistribute_step(env, spec);
    } else {
      SHARDSIM_ASSERT(false, "the loader accepted an op the runner does not know");
    }
  }
  return trace;
}

}  // namespace shardsim
