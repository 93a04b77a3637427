#include "ops/gqa_attention/gqa-inl.hpp"

namespace shardsim {

SHARDSIM_INSTANTIATE_GQA(float)
SHARDSIM_INSTANTIATE_GQA(double)

}  // namespace shardsim
