// The Mp instantiation of the attention kernels, in its own translation unit (DESIGN.md
// invariant 6).
#include "shardsim/mp.hpp"
#include "shardsim/ops/attention/attention-inl.hpp"

namespace shardsim {

SHARDSIM_INSTANTIATE_ATTENTION(Mp)

}  // namespace shardsim
