// The NarrowFloat instantiation of rms_norm (accumulate = "storage", storage.hpp), in its own
// translation unit like the Mp one (invariant 6 in docs/architecture.md).
#include "shardsim/narrow_float.hpp"
#include "shardsim/ops/rms_norm-inl.hpp"

namespace shardsim {

SHARDSIM_INSTANTIATE_RMS_NORM(NarrowFloat)

}  // namespace shardsim
