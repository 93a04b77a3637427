#include "ops/attention/attention-inl.hpp"

namespace shardsim {

Shape head_shape(std::int64_t batch, const std::string& pos_axis, std::int64_t positions,
                 std::int64_t heads, std::int64_t head_dim) {
  return Shape({{"batch", batch}, {pos_axis, positions}, {"head", heads}, {"head_dim", head_dim}});
}

SHARDSIM_INSTANTIATE_ATTENTION(float)
SHARDSIM_INSTANTIATE_ATTENTION(double)

}  // namespace shardsim
