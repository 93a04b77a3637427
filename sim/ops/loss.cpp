#include "shardsim/ops/loss-inl.hpp"

namespace shardsim {

SHARDSIM_INSTANTIATE_LOSS(float)
SHARDSIM_INSTANTIATE_LOSS(double)

}  // namespace shardsim
