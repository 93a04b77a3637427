// The dd and qd instantiations (qd.hpp) of every op but attention, in one translation unit: the
// same templated kernels as float, double and Mp (invariant 6 in docs/architecture.md), kept apart
// so that only this file (and attention/attention_qd.cpp) compiles them against QD.
#include "shardsim/ops/add-inl.hpp"
#include "shardsim/ops/dropout-inl.hpp"
#include "shardsim/ops/gelu-inl.hpp"
#include "shardsim/ops/layer_norm-inl.hpp"
#include "shardsim/ops/linear-inl.hpp"
#include "shardsim/ops/loss-inl.hpp"
#include "shardsim/ops/rms_norm-inl.hpp"
#include "shardsim/ops/rope-inl.hpp"
#include "shardsim/qd.hpp"
#include "shardsim/qd_dot.hpp"

namespace shardsim {

#define SHARDSIM_INSTANTIATE_OPS_QD(T) \
  SHARDSIM_INSTANTIATE_ADD(T)          \
  SHARDSIM_INSTANTIATE_DROPOUT(T)      \
  SHARDSIM_INSTANTIATE_GELU(T)         \
  SHARDSIM_INSTANTIATE_LAYER_NORM(T)   \
  SHARDSIM_INSTANTIATE_LINEAR(T)       \
  SHARDSIM_INSTANTIATE_LOSS(T)         \
  SHARDSIM_INSTANTIATE_RMS_NORM(T)     \
  SHARDSIM_INSTANTIATE_ROPE(T)

SHARDSIM_INSTANTIATE_OPS_QD(Dd)
SHARDSIM_INSTANTIATE_OPS_QD(Qd)

}  // namespace shardsim
