// The Mp instantiation of the comparator, in its own translation unit (invariant 6 in
// docs/architecture.md).
#include "shardsim/mp.hpp"
#include "shardsim/mp_exact.hpp"
#include "sim/compare/compare-inl.hpp"

namespace shardsim::detail {

RunReport evaluate_mp(const Scenario& scenario, unsigned bits, const RunOptions& options) {
  const unsigned actual = set_mp_precision(bits);
  return evaluate_at<Mp>(scenario, Precision{ScalarKind::mp, bits}, actual, options);
}

}  // namespace shardsim::detail
