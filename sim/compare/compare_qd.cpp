// The qd instantiation (core/qd.hpp) of the comparator, in its own translation unit (invariant
// 6); its run is runner/runner_qd.cpp.
#include "core/qd.hpp"
#include "core/qd_exact.hpp"
#include "compare/evaluate-inl.hpp"

namespace shardsim::detail {

RunReport evaluate_qd(const Scenario& scenario, const RunOptions& options) {
  return evaluate_at<Qd>(scenario, parse_precision("qd"), Qd::kBits, options);
}

}  // namespace shardsim::detail
