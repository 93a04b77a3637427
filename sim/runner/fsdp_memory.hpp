// Private to the runner: the per-rank parameter memory of an fsdp scenario (ParameterMemory in
// runner.hpp), from the scenario's shapes and layouts alone.
#pragma once

#include <algorithm>

#include "shardsim/runner/runner.hpp"

namespace shardsim {

inline std::int64_t ceil_div(std::int64_t n, std::int64_t k) { return (n + k - 1) / k; }

// REQUIRES: scenario.fsdp.
inline ParameterMemory fsdp_parameter_memory(const Scenario& scenario, std::int64_t element_bytes) {
  const FsdpSpec& spec = *scenario.fsdp;
  const Mesh& mesh = scenario.mesh.devices;
  const int ranks = mesh.size();
  const std::int64_t k = mesh.dim(spec.dim).size;
  ParameterMemory memory;
  memory.style = std::string(fsdp_style_name(spec.style));
  memory.dim = mesh.dim(spec.dim).name;
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
      memory.gathered_peak[rank] = std::max(memory.gathered_peak[rank], k * shard * element_bytes);
    }
    if (scenario.train_steps > 0) {
      memory.sharded_grads[rank] = memory.sharded_params[rank];
      memory.unsharded_grads_peak[rank] = memory.gathered_peak[rank];
    }
  }
  return memory;
}

}  // namespace shardsim
