// The Mp instantiation of RoPE, in its own translation unit (DESIGN.md invariant 6).
#include "shardsim/mp.hpp"
#include "shardsim/ops/rope-inl.hpp"

namespace shardsim {

SHARDSIM_INSTANTIATE_ROPE(Mp)

}  // namespace shardsim
