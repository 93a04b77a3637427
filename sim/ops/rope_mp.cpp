// The Mp instantiation of RoPE, in its own translation unit (invariant 6, README "Invariants").
#include "shardsim/mp.hpp"
#include "shardsim/ops/rope-inl.hpp"

namespace shardsim {

SHARDSIM_INSTANTIATE_ROPE(Mp)

}  // namespace shardsim
