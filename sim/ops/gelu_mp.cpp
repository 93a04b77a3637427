// The Mp instantiation of gelu, in its own translation unit (invariant 6 in docs/architecture.md).
#include "shardsim/mp.hpp"
#include "shardsim/ops/gelu-inl.hpp"

namespace shardsim {

SHARDSIM_INSTANTIATE_GELU(Mp)

}  // namespace shardsim
