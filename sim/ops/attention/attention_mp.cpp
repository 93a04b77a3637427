// The Mp instantiation of the attention kernels, in its own translation unit: only it pulls in
// Boost.Multiprecision and MPFR, and float/double builds of the kernels do not wait on it.
#include "shardsim/mp.hpp"
#include "shardsim/ops/attention/attention-inl.hpp"

namespace shardsim {

SHARDSIM_INSTANTIATE_ATTENTION(Mp)

}  // namespace shardsim
