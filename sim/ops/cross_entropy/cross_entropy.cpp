#include "ops/cross_entropy/cross_entropy-inl.hpp"

namespace shardsim {

SHARDSIM_INSTANTIATE_CROSS_ENTROPY(float)
SHARDSIM_INSTANTIATE_CROSS_ENTROPY(double)

}  // namespace shardsim
