#include "ops/embedding/embedding-inl.hpp"

namespace shardsim {

SHARDSIM_INSTANTIATE_EMBEDDING(float)
SHARDSIM_INSTANTIATE_EMBEDDING(double)

}  // namespace shardsim
