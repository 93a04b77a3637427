#include "ops/linear/linear-inl.hpp"

namespace shardsim {

SHARDSIM_INSTANTIATE_LINEAR(float)
SHARDSIM_INSTANTIATE_LINEAR(double)

}  // namespace shardsim
