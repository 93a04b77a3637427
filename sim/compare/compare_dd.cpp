// The dd instantiation (core/qd.hpp) of the comparator, in its own translation unit (invariant
// 6); its run is runner/runner_dd.cpp.
#include "core/qd.hpp"
#include "core/qd_exact.hpp"
#include "compare/evaluate-inl.hpp"

namespace shardsim::detail {

RunReport evaluate_dd(const Scenario& scenario, const RunOptions& options) {
  return evaluate_at<Dd>(scenario, parse_precision("dd"), Dd::kBits, options);
}

}  // namespace shardsim::detail
