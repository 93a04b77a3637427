#include "ops/rms_norm/rms_norm-inl.hpp"

namespace shardsim {

SHARDSIM_INSTANTIATE_RMS_NORM(float)
SHARDSIM_INSTANTIATE_RMS_NORM(double)

}  // namespace shardsim
