#include "ops/attention/stream-inl.hpp"

namespace shardsim {

SHARDSIM_INSTANTIATE_ATTENTION_STREAM(float)
SHARDSIM_INSTANTIATE_ATTENTION_STREAM(double)

}  // namespace shardsim
