// The dd instantiation (core/qd.hpp) of the runner, in its own translation unit (invariant 6 in
// docs/architecture.md); compare/compare_dd.cpp judges its boundaries and core/world_qd.cpp
// holds its world. runner_qd.cpp is the other unit, so the two compile in parallel (each
// instantiates the whole runner).
#include "core/qd.hpp"
#include "core/qd_exact.hpp"
#include "runner/runner-inl.hpp"

namespace shardsim {

template std::vector<TraceEntry> run_scenario(const Scenario&, const RunOptions&, BoundarySink<Dd>&,
                                              std::optional<NarrowFormat>);

}  // namespace shardsim
