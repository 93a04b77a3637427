// The dd and qd instantiations (qd.hpp) of the attention kernels, projections and streaming, in
// one translation unit (invariant 6 in docs/architecture.md).
#include "shardsim/ops/attention/attention-inl.hpp"
#include "shardsim/ops/attention/project-inl.hpp"
#include "shardsim/ops/attention/stream-inl.hpp"
#include "shardsim/qd.hpp"
#include "shardsim/qd_dot.hpp"

namespace shardsim {

SHARDSIM_INSTANTIATE_ATTENTION(Dd)
SHARDSIM_INSTANTIATE_ATTENTION(Qd)
SHARDSIM_INSTANTIATE_ATTENTION_PROJECT(Dd)
SHARDSIM_INSTANTIATE_ATTENTION_PROJECT(Qd)
SHARDSIM_INSTANTIATE_ATTENTION_STREAM(Dd)
SHARDSIM_INSTANTIATE_ATTENTION_STREAM(Qd)

}  // namespace shardsim
