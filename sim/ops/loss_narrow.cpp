// The NarrowFloat instantiation of loss (accumulate = "storage", storage.hpp), in its own
// translation unit like the Mp one (invariant 6 in docs/architecture.md).
#include "shardsim/narrow_float.hpp"
#include "shardsim/ops/loss-inl.hpp"

namespace shardsim {

SHARDSIM_INSTANTIATE_LOSS(NarrowFloat)

}  // namespace shardsim
