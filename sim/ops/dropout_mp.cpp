// The Mp instantiation of dropout, in its own translation unit (invariant 6, README "Invariants").
#include "shardsim/mp.hpp"
#include "shardsim/ops/dropout-inl.hpp"

namespace shardsim {

SHARDSIM_INSTANTIATE_DROPOUT(Mp)

}  // namespace shardsim
