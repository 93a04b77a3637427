// The NarrowFloat instantiation of add (accumulate = "storage", storage.hpp), in its own
// translation unit like the Mp one (invariant 6 in docs/architecture.md).
#include "shardsim/narrow_float.hpp"
#include "shardsim/ops/add-inl.hpp"

namespace shardsim {

SHARDSIM_INSTANTIATE_ADD(NarrowFloat)

}  // namespace shardsim
