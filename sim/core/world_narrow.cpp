// The NarrowFloat instantiation of the world (accumulate = "storage", storage.hpp).
#include "shardsim/narrow_float.hpp"
#include "shardsim/world-inl.hpp"

namespace shardsim {

template class World<NarrowFloat>;
template void zero_padding(DistTensor<NarrowFloat>&);

}  // namespace shardsim
