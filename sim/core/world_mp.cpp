// The Mp instantiation of the world, in its own translation unit (invariant 6 in
// docs/architecture.md).
#include "core/mp.hpp"
#include "core/wire_mp.hpp"
#include "core/world-inl.hpp"

namespace shardsim {

template class World<Mp>;
template void zero_padding(DistTensor<Mp>&);

}  // namespace shardsim
