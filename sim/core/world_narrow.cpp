// The NarrowFloat instantiation of the world (accumulate = "storage", storage.hpp).
#include "core/narrow_float.hpp"
#include "core/world-inl.hpp"

namespace shardsim {

template class World<NarrowFloat>;
template void zero_padding(DistTensor<NarrowFloat>&);

}  // namespace shardsim
