// Shape and placement rules that several ops' scenario entries share (ops/*/entry.cpp).
#pragma once

#include <limits>
#include <string>

#include "scenario/loader_internal.hpp"

namespace shardsim {

// eps is used as float(eps) in f32 runs: beyond the largest float it would be inf.
inline const ParamBounds kEpsBounds{.low = 0,
                                    .high = std::numeric_limits<float>::max(),
                                    .note = "(the f32 range: f32 runs use float(eps))"};

// An elementwise op (gelu, dropout): the output keeps the input's shape and placement.
void elementwise_rules(const StepSpec& step, StepContext& ctx);

// A norm over `axis` (layer_norm, rms_norm), in two halves around an op's own checks:
// norm_input_rules checks a Shard or Replicate input with the normalized axis and returns whether
// it is Shard(axis) (no whole row on any rank: distributed statistics, and parameters sharded
// like the input's features); norm_param_rules checks the parameters `weight` and `bias` (those
// the step has) of shape [axis], held like the input's features, and defines the output.
bool norm_input_rules(const StepSpec& step, StepContext& ctx, const std::string& axis);
void norm_param_rules(const StepSpec& step, StepContext& ctx, const std::string& axis, bool hidden);

}  // namespace shardsim
