// The Mp instantiation of the streamed attention oracle, in its own translation unit: only it pulls
// in Boost.Multiprecision and MPFR, and float/double builds of the kernels do not wait on it.
#include "shardsim/mp.hpp"
#include "shardsim/ops/attention/stream-inl.hpp"

namespace shardsim {

SHARDSIM_INSTANTIATE_ATTENTION_STREAM(Mp)

}  // namespace shardsim
