#include "report/fsdp_report.hpp"

#include <sstream>

namespace shardsim {

// Why the reduce-scatter sums: the report states the convention a backend must match.
constexpr const char* kGradReduceReason =
    "sum: the loss divides by the global valid-token count, so each rank's gradient is already "
    "its addend of the gradient; dividing by the fsdp group size as well (FSDP's default "
    "average) would scale it twice";

nlohmann::ordered_json fsdp_json(const Scenario& scenario) {
  const FsdpSpec& spec = *scenario.fsdp;
  nlohmann::ordered_json units = nlohmann::ordered_json::array();
  for (const FsdpSpec::Unit& unit : spec.units) {
    nlohmann::ordered_json row{{"step", unit.step}, {"params", unit.params}};
    if (spec.style == FsdpSpec::Style::flat) row["flat"] = unit.flat_name;
    units.push_back(row);
  }
  nlohmann::ordered_json out{{"style", fsdp_style_name(spec.style)},
                             {"dim", scenario.mesh.devices.dim(spec.dim).name},
                             {"units", units},
                             {"grad_reduce", kGradReduceReason},
                             {"optimizer_state", scenario.adamw()
                                                     ? "AdamW exp_avg and exp_avg_sq, sharded "
                                                       "like the parameters"
                                                     : "none (plain SGD)"}};
  // Mixed precision, only where declared (docs/layouts.md "Mixed precision").
  if (spec.param_dtype) out["param_dtype"] = spec.param_dtype->name();
  if (spec.reduce_dtype) out["reduce_dtype"] = spec.reduce_dtype->name();
  return out;
}

std::string format_parameter_memory(const ParameterMemory& memory) {
  std::ostringstream out;
  auto line = [&](const char* what, const std::vector<std::int64_t>& bytes) {
    out << "  " << what << ":";
    for (std::int64_t b : bytes) out << " " << b;
    out << "\n";
  };
  out << "parameter memory (fsdp " << memory.style << " over " << memory.dim
      << "), bytes per rank:\n";
  line("parameter shards", memory.sharded_params);
  line("gradient shards", memory.sharded_grads);
  line(memory.adamw ? "optimizer state (AdamW: two moments)"
                    : "optimizer state (plain SGD keeps none)",
       memory.optimizer_state);
  line("gathered parameters, peak (one unit at a time)", memory.gathered_peak);
  line("unsharded gradients, peak (until the reduce-scatter)", memory.unsharded_grads_peak);
  return out.str();
}

}  // namespace shardsim
