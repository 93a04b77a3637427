// The NarrowFloat instantiation of the comparator: bf16 and f16 runs with accumulate = "storage"
// (storage.hpp), in their own translation unit like the Mp one.
#include "core/narrow_float.hpp"
#include "compare/evaluate-inl.hpp"

namespace shardsim::detail {

RunReport evaluate_narrow_storage(const Scenario& scenario, const Precision& precision,
                                  const RunOptions& options) {
  set_narrow_float_format(narrow_format(precision));
  return evaluate_at<NarrowFloat>(scenario, precision, precision.bits, options);
}

}  // namespace shardsim::detail
