// The Mp instantiation of RoPE, in its own translation unit: only it pulls in
// Boost.Multiprecision and MPFR, and float/double builds of the kernels do not wait on it.
#include "shardsim/mp.hpp"
#include "shardsim/ops/rope-inl.hpp"

namespace shardsim {

SHARDSIM_INSTANTIATE_ROPE(Mp)

}  // namespace shardsim
