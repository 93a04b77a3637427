// Sharded plan for SwiGLU: elementwise over the gate and the up projection, held alike, so every
// rank applies the kernel to its locals and no collective is needed. Same arithmetic as the dense
// oracle: exact under any placement but Partial (the loader rejects a Partial operand).
#pragma once

#include <string>

#include "core/world.hpp"
#include "ops/op_list.hpp"
#include "ops/swiglu/swiglu.hpp"

namespace shardsim {

// REQUIRES: g and u have one global shape and placement, without Partial. y is held like them.
template <typename T>
DistTensor<T> swiglu_sharded(const World<T>& world, const DistTensor<T>& g, const DistTensor<T>& u,
                             const std::string& output) {
  SHARDSIM_ASSERT(g.global == u.global && g.layout == u.layout && !g.layout.has_partial(),
                  "swiglu: gate and up differ in shape or placement, or are Partial");
  DistTensor<T> y = world.make(output, g.global, g.layout);
  world.for_each_rank([&](int r) { swiglu_forward(g.local(r), u.local(r), y.local(r)); });
  zero_padding(y);
  world.compare_boundary(
      {.op = op_label(OpKind::swiglu), .tensor = output, .exact = true, .inputs = {g.name, u.name}},
      y);
  return y;
}

// dg, du per rank. REQUIRES: dy is held at elementwise_grad_target(g, dy) (see align_grad); dg and
// du have dy's placement (Partial where dy is: both are linear in dy). The caller records them.
template <typename T>
void swiglu_backward_sharded(const World<T>& world, const DistTensor<T>& dy, const DistTensor<T>& g,
                             const DistTensor<T>& u, const std::string& dg_name,
                             const std::string& du_name, DistTensor<T>& dg, DistTensor<T>& du) {
  dg = world.make(dg_name, g.global, dy.layout);
  du = world.make(du_name, g.global, dy.layout);
  world.for_each_rank([&](int r) {
    swiglu_backward(dy.local(r), g.local(r), u.local(r), dg.local(r), du.local(r));
  });
  zero_padding(dg);
  zero_padding(du);
}

}  // namespace shardsim
