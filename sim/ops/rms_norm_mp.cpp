// The Mp instantiation of RMSNorm, in its own translation unit (invariant 6 in
// docs/architecture.md).
#include "shardsim/mp.hpp"
#include "shardsim/ops/rms_norm-inl.hpp"

namespace shardsim {

SHARDSIM_INSTANTIATE_RMS_NORM(Mp)

}  // namespace shardsim
