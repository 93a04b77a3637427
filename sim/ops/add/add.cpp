#include "ops/add/add-inl.hpp"

namespace shardsim {

SHARDSIM_INSTANTIATE_ADD(float)
SHARDSIM_INSTANTIATE_ADD(double)

}  // namespace shardsim
