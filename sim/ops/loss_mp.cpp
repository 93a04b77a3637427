// The Mp instantiation of the loss, in its own translation unit (invariant 6 in
// docs/architecture.md).
#include "shardsim/mp.hpp"
#include "shardsim/ops/loss-inl.hpp"

namespace shardsim {

SHARDSIM_INSTANTIATE_LOSS(Mp)

}  // namespace shardsim
