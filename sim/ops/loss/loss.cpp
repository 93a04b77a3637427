#include "ops/loss/loss-inl.hpp"

namespace shardsim {

std::int64_t masked_valid_tokens(const Shape& local, const MaskedMseParams& params,
                                 const LocalFrame& frame) {
  std::int64_t count = 0;
  detail::for_each_token(local, params, frame,
                         [&](std::int64_t, std::int64_t, std::int64_t, bool valid) {
                           if (valid) ++count;
                         });
  return count;
}

SHARDSIM_INSTANTIATE_LOSS(float)
SHARDSIM_INSTANTIATE_LOSS(double)

}  // namespace shardsim
