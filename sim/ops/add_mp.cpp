// The Mp instantiation of add, in its own translation unit (invariant 6 in docs/architecture.md).
#include "shardsim/mp.hpp"
#include "shardsim/ops/add-inl.hpp"

namespace shardsim {

SHARDSIM_INSTANTIATE_ADD(Mp)

}  // namespace shardsim
