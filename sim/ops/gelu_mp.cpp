// The Mp instantiation of gelu, in its own translation unit (DESIGN.md invariant 6).
#include "shardsim/mp.hpp"
#include "shardsim/ops/gelu-inl.hpp"

namespace shardsim {

SHARDSIM_INSTANTIATE_GELU(Mp)

}  // namespace shardsim
