// The Mp instantiation of the runner, in its own translation unit (DESIGN.md invariant 6).
#include "shardsim/mp.hpp"
#include "sim/runner/runner-inl.hpp"

namespace shardsim {

template std::vector<TraceEntry> run_scenario(const Scenario&, const RunOptions&,
                                              BoundarySink<Mp>&);

}  // namespace shardsim
