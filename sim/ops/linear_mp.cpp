// The Mp instantiation of linear, in its own translation unit (DESIGN.md invariant 6).
#include "shardsim/mp.hpp"
#include "shardsim/ops/linear-inl.hpp"

namespace shardsim {

SHARDSIM_INSTANTIATE_LINEAR(Mp)

}  // namespace shardsim
