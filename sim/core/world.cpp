#include "core/world.hpp"

#include "core/world-inl.hpp"

namespace shardsim {

template class World<float>;
template class World<double>;
template void zero_padding(DistTensor<float>&);
template void zero_padding(DistTensor<double>&);

}  // namespace shardsim
