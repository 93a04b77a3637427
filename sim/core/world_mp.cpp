// The Mp instantiation of the world, in its own translation unit (DESIGN.md invariant 6).
#include "shardsim/mp.hpp"
#include "shardsim/world-inl.hpp"

namespace shardsim {

template class World<Mp>;
template void zero_padding(DistTensor<Mp>&);

}  // namespace shardsim
