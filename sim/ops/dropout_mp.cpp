// The Mp instantiation of dropout, in its own translation unit (invariant 6 in
// docs/architecture.md).
#include "shardsim/mp.hpp"
#include "shardsim/ops/dropout-inl.hpp"

namespace shardsim {

SHARDSIM_INSTANTIATE_DROPOUT(Mp)

}  // namespace shardsim
