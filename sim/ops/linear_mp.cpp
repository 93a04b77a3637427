// The Mp instantiation of linear, in its own translation unit (invariant 6 in
// docs/architecture.md).
#include "shardsim/mp.hpp"
#include "shardsim/ops/linear-inl.hpp"

namespace shardsim {

SHARDSIM_INSTANTIATE_LINEAR(Mp)

}  // namespace shardsim
