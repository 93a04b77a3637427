// The Mp instantiation of the streamed attention oracle, in its own translation unit (DESIGN.md
// invariant 6).
#include "shardsim/mp.hpp"
#include "shardsim/ops/attention/stream-inl.hpp"

namespace shardsim {

SHARDSIM_INSTANTIATE_ATTENTION_STREAM(Mp)

}  // namespace shardsim
