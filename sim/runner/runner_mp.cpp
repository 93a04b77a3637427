// The Mp instantiation of the runner, in its own translation unit (invariant 6 in
// docs/architecture.md).
#include "core/mp.hpp"
#include "runner/runner-inl.hpp"

namespace shardsim {

template std::vector<TraceEntry> run_scenario(const Scenario&, const RunOptions&,
                                              BoundarySink<Mp>&, std::optional<NarrowFormat>);

}  // namespace shardsim
