// The NarrowFloat instantiation of layer_norm (accumulate = "storage", storage.hpp), in its own
// translation unit like the Mp one (invariant 6 in docs/architecture.md).
#include "shardsim/narrow_float.hpp"
#include "shardsim/ops/layer_norm-inl.hpp"

namespace shardsim {

SHARDSIM_INSTANTIATE_LAYER_NORM(NarrowFloat)

}  // namespace shardsim
