#include "sim/runner-inl.hpp"

namespace shardsim {

ReduceOrder effective_reduce_order(const Scenario& scenario, const RunOptions& options) {
  return options.reduce_order.value_or(scenario.mesh.reduce_order);
}

Schedule effective_schedule(const Scenario& scenario, const RunOptions& options) {
  return options.schedule.value_or(scenario.mesh.schedule);
}

template std::vector<TraceEntry> run_scenario(const Scenario&, const RunOptions&,
                                              BoundarySink<float>&);
template std::vector<TraceEntry> run_scenario(const Scenario&, const RunOptions&,
                                              BoundarySink<double>&);

}  // namespace shardsim
