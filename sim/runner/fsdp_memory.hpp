// Private to the runner: the per-rank parameter memory of an fsdp scenario (ParameterMemory in
// runner.hpp), from the scenario's shapes and layouts alone.
#pragma once

#include <algorithm>
#include <optional>
#include <string>

#include "runner/runner.hpp"

namespace shardsim {

inline std::int64_t ceil_div(std::int64_t n, std::int64_t k) { return (n + k - 1) / k; }

// Bytes of one element in an fsdp dtype (bf16 and f16 2, f32 4, f64 8); no dtype, or one at least
// as wide as the run, is the run's own `run_bytes`.
inline std::int64_t fsdp_dtype_bytes(const std::optional<Precision>& dtype,
                                     std::int64_t run_bytes) {
  if (!dtype) return run_bytes;
  const std::int64_t bytes = dtype->bits <= 11 ? 2 : dtype->bits <= 24 ? 4 : 8;
  return std::min(bytes, run_bytes);
}

// Master shards, gradient shards and optimizer state (SGD none, AdamW two moments per element)
// count `element_bytes` (the run's); the gathered copy counts param_dtype's bytes, the unsharded
// gradients param_dtype's (autograd's) plus, when reduce_dtype is another dtype, the reduce_dtype
// copy the reduce-scatter reads (both live while it is cast). REQUIRES: scenario.fsdp.
inline ParameterMemory fsdp_parameter_memory(const Scenario& scenario, std::int64_t element_bytes) {
  const FsdpSpec& spec = *scenario.fsdp;
  const std::int64_t param_bytes = fsdp_dtype_bytes(spec.param_dtype, element_bytes);
  const std::int64_t reduce_bytes = fsdp_dtype_bytes(spec.reduce_dtype, element_bytes);
  const auto effective = [&](const std::optional<Precision>& dtype) {
    return dtype && fsdp_dtype_bytes(dtype, element_bytes) < element_bytes ? dtype->name()
                                                                           : std::string("run");
  };
  const bool cast = effective(spec.param_dtype) != effective(spec.reduce_dtype);
  const std::int64_t grad_bytes = param_bytes + (cast ? reduce_bytes : 0);
  const Mesh& mesh = scenario.mesh.devices;
  const int ranks = mesh.size();
  const std::int64_t k = mesh.dim(spec.dim).size;
  ParameterMemory memory;
  memory.style = std::string(fsdp_style_name(spec.style));
  memory.dim = mesh.dim(spec.dim).name;
  memory.adamw = scenario.adamw();
  for (auto* figure : {&memory.sharded_params, &memory.sharded_grads, &memory.optimizer_state,
                       &memory.gathered_peak, &memory.unsharded_grads_peak}) {
    figure->assign(static_cast<std::size_t>(ranks), 0);
  }
  for (int r = 0; r < ranks; ++r) {
    const auto rank = static_cast<std::size_t>(r);
    for (const FsdpSpec::Unit& unit : spec.units) {
      std::int64_t shard = 0;  // elements
      if (spec.style == FsdpSpec::Style::flat) {
        std::int64_t total = 0;
        for (const std::string& p : unit.params) total += scenario.find_tensor(p)->shape.numel();
        shard = ceil_div(total, k);
      } else {
        for (const std::string& p : unit.params) {
          const TensorSpec& tensor = *scenario.find_tensor(p);
          const Shape local = local_shape(tensor.shape, tensor.layout, mesh, r);
          const std::int64_t rows = local[0].extent;
          const std::int64_t rest = rows > 0 ? local.numel() / rows : 0;
          shard += ceil_div(rows, k) * rest;
        }
      }
      memory.sharded_params[rank] += shard * element_bytes;
      memory.gathered_peak[rank] = std::max(memory.gathered_peak[rank], k * shard * param_bytes);
      if (scenario.train_steps > 0) {
        memory.unsharded_grads_peak[rank] =
            std::max(memory.unsharded_grads_peak[rank], k * shard * grad_bytes);
      }
    }
    if (scenario.train_steps > 0) memory.sharded_grads[rank] = memory.sharded_params[rank];
    // AdamW keeps exp_avg and exp_avg_sq, each sharded like the parameters.
    if (scenario.adamw()) memory.optimizer_state[rank] = 2 * memory.sharded_params[rank];
  }
  return memory;
}

}  // namespace shardsim
