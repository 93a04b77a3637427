#include "ops/swiglu/swiglu-inl.hpp"

namespace shardsim {

SHARDSIM_INSTANTIATE_SWIGLU(float)
SHARDSIM_INSTANTIATE_SWIGLU(double)

}  // namespace shardsim
