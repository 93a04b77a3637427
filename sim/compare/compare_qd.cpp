// The qd instantiation (qd.hpp) of the world, the runner and the comparator, in its own
// translation unit (invariant 6 in docs/architecture.md); dd's is compare_dd.cpp.
#include "shardsim/qd.hpp"
#include "shardsim/qd_exact.hpp"
#include "shardsim/world-inl.hpp"
#include "sim/compare/compare-inl.hpp"
#include "sim/runner/runner-inl.hpp"

namespace shardsim {

template class World<Qd>;
template void zero_padding(DistTensor<Qd>&);
template std::vector<TraceEntry> run_scenario(const Scenario&, const RunOptions&, BoundarySink<Qd>&,
                                              std::optional<NarrowFormat>);

namespace detail {

RunReport evaluate_qd(const Scenario& scenario, const RunOptions& options) {
  return evaluate_at<Qd>(scenario, parse_precision("qd"), Qd::kBits, options);
}

}  // namespace detail

}  // namespace shardsim
