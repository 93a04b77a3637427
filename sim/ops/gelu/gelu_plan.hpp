// Sharded plan for GELU: elementwise, so every rank applies the kernel to its locals and no
// collective is needed. Same arithmetic as the dense oracle: exact under any placement but
// Partial (GELU is not linear; the loader rejects a Partial input).
#pragma once

#include <string>
#include <vector>

#include "core/world.hpp"
#include "ops/add/add_plan.hpp"
#include "ops/gelu/gelu.hpp"
#include "ops/op_list.hpp"

namespace shardsim {

// In place when `x_values` holds x's rank tensors, moved out by a caller that does not read x
// again (layer_norm_row_sharded).
// REQUIRES: x is not Partial. y has x's placement.
template <typename T>
DistTensor<T> gelu_sharded(const World<T>& world, const DistTensor<T>& x, const GeluParams& params,
                           const std::string& output, std::vector<Tensor<T>> x_values = {}) {
  SHARDSIM_ASSERT(!x.layout.has_partial(), "gelu needs a Shard or Replicate input");
  const bool in_place = !x_values.empty();
  DistTensor<T> y = make_output_like(output, x, std::move(x_values));
  const DistTensor<T>& source = in_place ? y : x;  // x's values, until y's overwrite them
  world.for_each_rank([&](int r) { gelu_forward(source.local(r), params, y.local(r)); });
  zero_padding(y);
  world.compare_boundary(
      {.op = op_label(OpKind::gelu), .tensor = output, .exact = true, .inputs = {x.name}}, y);
  return y;
}

// dx = dy * gelu'(x) per rank. REQUIRES: dy is held at elementwise_grad_target(x, dy) (see
// align_grad); dx has dy's placement. The caller records dx.
template <typename T>
DistTensor<T> gelu_backward_sharded(const World<T>& world, const DistTensor<T>& dy,
                                    const DistTensor<T>& x, const GeluParams& params,
                                    const std::string& name) {
  DistTensor<T> dx = world.make(name, x.global, dy.layout);
  world.for_each_rank([&](int r) { gelu_backward(dy.local(r), x.local(r), params, dx.local(r)); });
  zero_padding(dx);
  return dx;
}

}  // namespace shardsim
