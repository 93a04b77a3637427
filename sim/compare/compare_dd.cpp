// The dd instantiation (qd.hpp) of the world, the runner and the comparator, in its own
// translation unit (invariant 6 in docs/architecture.md); qd's is compare_qd.cpp (two units compile
// in parallel: each instantiates the whole runner).
#include "shardsim/qd.hpp"
#include "shardsim/qd_exact.hpp"
#include "shardsim/world-inl.hpp"
#include "sim/compare/compare-inl.hpp"
#include "sim/runner/runner-inl.hpp"

namespace shardsim {

template class World<Dd>;
template void zero_padding(DistTensor<Dd>&);
template std::vector<TraceEntry> run_scenario(const Scenario&, const RunOptions&, BoundarySink<Dd>&,
                                              std::optional<NarrowFormat>);

namespace detail {

RunReport evaluate_dd(const Scenario& scenario, const RunOptions& options) {
  return evaluate_at<Dd>(scenario, parse_precision("dd"), Dd::kBits, options);
}

}  // namespace detail

}  // namespace shardsim
