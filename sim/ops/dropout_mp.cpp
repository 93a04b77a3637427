// The Mp instantiation of dropout, in its own translation unit (DESIGN.md invariant 6).
#include "shardsim/mp.hpp"
#include "shardsim/ops/dropout-inl.hpp"

namespace shardsim {

SHARDSIM_INSTANTIATE_DROPOUT(Mp)

}  // namespace shardsim
