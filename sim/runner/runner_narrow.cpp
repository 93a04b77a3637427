// The NarrowFloat instantiation of the runner (accumulate = "storage", storage.hpp).
#include "core/narrow_float.hpp"
#include "runner/runner-inl.hpp"

namespace shardsim {

template std::vector<TraceEntry> run_scenario(const Scenario&, const RunOptions&,
                                              BoundarySink<NarrowFloat>&,
                                              std::optional<NarrowFormat>);

}  // namespace shardsim
