#include "ops/attention/project-inl.hpp"

namespace shardsim {

SHARDSIM_INSTANTIATE_ATTENTION_PROJECT(float)
SHARDSIM_INSTANTIATE_ATTENTION_PROJECT(double)

}  // namespace shardsim
