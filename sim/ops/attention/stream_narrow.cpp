// The NarrowFloat instantiation of stream (accumulate = "storage", storage.hpp), in its own
// translation unit like the Mp one (invariant 6 in docs/architecture.md).
#include "shardsim/narrow_float.hpp"
#include "shardsim/ops/attention/stream-inl.hpp"

namespace shardsim {

SHARDSIM_INSTANTIATE_ATTENTION_STREAM(NarrowFloat)

}  // namespace shardsim
