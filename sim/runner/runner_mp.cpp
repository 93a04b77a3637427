// The Mp instantiation of the runner, in its own translation unit (invariant 6 in
// docs/architecture.md).
#include "shardsim/mp.hpp"
#include "sim/runner/runner-inl.hpp"

namespace shardsim {

template std::vector<TraceEntry> run_scenario(const Scenario&, const RunOptions&,
                                              BoundarySink<Mp>&, std::optional<NarrowFormat>);

}  // namespace shardsim
