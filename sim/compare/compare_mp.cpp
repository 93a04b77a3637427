// The Mp instantiation of the comparator, in its own translation unit (invariant 6 in
// docs/architecture.md).
#include "core/mp.hpp"
#include "core/mp_exact.hpp"
#include "compare/evaluate-inl.hpp"

namespace shardsim::detail {

RunReport evaluate_mp(const Scenario& scenario, unsigned bits, const RunOptions& options) {
  const unsigned actual = set_mp_precision(bits);
  return evaluate_at<Mp>(scenario, Precision{ScalarKind::mp, bits}, actual, options);
}

}  // namespace shardsim::detail
