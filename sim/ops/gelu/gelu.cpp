#include "ops/gelu/gelu-inl.hpp"

namespace shardsim {

std::string_view gelu_approx_name(GeluApprox approx) {
  return approx == GeluApprox::tanh ? "tanh" : "none";
}

SHARDSIM_INSTANTIATE_GELU(float)
SHARDSIM_INSTANTIATE_GELU(double)

}  // namespace shardsim
