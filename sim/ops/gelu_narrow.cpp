// The NarrowFloat instantiation of gelu (accumulate = "storage", storage.hpp), in its own
// translation unit like the Mp one (invariant 6 in docs/architecture.md).
#include "shardsim/narrow_float.hpp"
#include "shardsim/ops/gelu-inl.hpp"

namespace shardsim {

SHARDSIM_INSTANTIATE_GELU(NarrowFloat)

}  // namespace shardsim
