// The Mp instantiation of the attention projections, in its own translation unit: only it pulls in
// Boost.Multiprecision and MPFR, and float/double builds of the kernels do not wait on it.
#include "shardsim/mp.hpp"
#include "shardsim/ops/attention/project-inl.hpp"

namespace shardsim {

SHARDSIM_INSTANTIATE_ATTENTION_PROJECT(Mp)

}  // namespace shardsim
