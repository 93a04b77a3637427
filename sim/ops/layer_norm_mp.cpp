// The Mp instantiation of LayerNorm, in its own translation unit (invariant 6 in
// docs/architecture.md).
#include "shardsim/mp.hpp"
#include "shardsim/ops/layer_norm-inl.hpp"

namespace shardsim {

SHARDSIM_INSTANTIATE_LAYER_NORM(Mp)

}  // namespace shardsim
