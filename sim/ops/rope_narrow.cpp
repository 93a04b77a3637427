// The NarrowFloat instantiation of rope (accumulate = "storage", storage.hpp), in its own
// translation unit like the Mp one (invariant 6 in docs/architecture.md).
#include "shardsim/narrow_float.hpp"
#include "shardsim/ops/rope-inl.hpp"

namespace shardsim {

SHARDSIM_INSTANTIATE_ROPE(NarrowFloat)

}  // namespace shardsim
