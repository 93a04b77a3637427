// The Mp instantiation of the attention projections, in its own translation unit (DESIGN.md
// invariant 6).
#include "shardsim/mp.hpp"
#include "shardsim/ops/attention/project-inl.hpp"

namespace shardsim {

SHARDSIM_INSTANTIATE_ATTENTION_PROJECT(Mp)

}  // namespace shardsim
