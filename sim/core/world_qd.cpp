// The Dd and Qd instantiations (core/qd.hpp) of the world, in their own translation unit
// (invariant 6 in docs/architecture.md). The ops' and the runner's dd and qd units use them.
#include "core/qd.hpp"
#include "core/qd_exact.hpp"
#include "core/world-inl.hpp"

namespace shardsim {

template class World<Dd>;
template class World<Qd>;
template void zero_padding(DistTensor<Dd>&);
template void zero_padding(DistTensor<Qd>&);

}  // namespace shardsim
