// The NarrowFloat instantiation of project (accumulate = "storage", storage.hpp), in its own
// translation unit like the Mp one (invariant 6 in docs/architecture.md).
#include "shardsim/narrow_float.hpp"
#include "shardsim/ops/attention/project-inl.hpp"

namespace shardsim {

SHARDSIM_INSTANTIATE_ATTENTION_PROJECT(NarrowFloat)

}  // namespace shardsim
