#include "ops/layer_norm/layer_norm-inl.hpp"

namespace shardsim {

SHARDSIM_INSTANTIATE_LAYER_NORM(float)
SHARDSIM_INSTANTIATE_LAYER_NORM(double)

}  // namespace shardsim
