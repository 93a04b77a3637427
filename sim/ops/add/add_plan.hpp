// Sharded plan for the residual add, and the gradient-placement rules every elementwise op's
// backward shares.
//
// Gradient placements. The gradient of a Shard tensor is held with the same Shard placement. The
// gradient of a Replicate tensor is either Replicate (every rank holds all of it) or Partial(sum)
// (the ranks' addends sum to it, e.g. dx of a column-parallel linear). The gradient of a
// Partial(sum) tensor is the full gradient on every rank, Replicate: the gradient of a sum is the
// same for each addend.
#pragma once

#include <string>

#include "core/world.hpp"
#include "ops/add/add.hpp"
#include "ops/op_list.hpp"

namespace shardsim {

// Where the gradient dy must be held so that an elementwise backward can pair it with the
// locals of a forward input placed as `x`, dim by dim: Shard -> the same Shard; Replicate ->
// Replicate, or Partial kept as Partial (an elementwise backward is linear in dy); Partial ->
// Replicate.
inline Placement elementwise_grad_target(const Placement& x, const Placement& dy) {
  if (x.is_partial()) return Placement::replicate();
  if (x.is_replicate()) return dy.is_partial() ? Placement::partial() : Placement::replicate();
  return x;
}
inline Layout elementwise_grad_target(const Layout& x, const Layout& dy) {
  Layout target = x;
  for (int d = 0; d < x.ndim(); ++d) target.dims[d] = elementwise_grad_target(x.on(d), dy.on(d));
  return target;
}

// The gradient of a parameter summed over the rows a rank holds (a row-wise op's weight): on
// each mesh dim Replicate where x and dy are whole there (every member holds every row), else
// Partial (each member's share of the sum).
inline Layout row_sum_grad_layout(const Layout& x, const Layout& dy) {
  Layout grad = Layout::uniform(x.ndim(), Placement::replicate());
  for (int d = 0; d < x.ndim(); ++d) {
    if (!(x.on(d).is_replicate() && dy.on(d).is_replicate())) grad.dims[d] = Placement::partial();
  }
  return grad;
}

// dx of a row-wise op (linear in dy): Partial where dy is Partial, x's placement elsewhere.
inline Layout row_dx_layout(const Layout& x, const Layout& dy) {
  Layout dx = x;
  for (int d = 0; d < x.ndim(); ++d) {
    if (dy.on(d).is_partial()) dx.dims[d] = Placement::partial();
  }
  return dx;
}

// Moves a gradient to `target` through the world's collectives (every dim that differs, in
// mesh-dim order), recording the boundary "NAME@TARGET" (compared with the oracle's NAME: moving
// data does not change values). Returns `dy` itself when it is already held that way.
template <typename T>
DistTensor<T> align_grad(const World<T>& world, const DistTensor<T>& dy, const Layout& target) {
  if (dy.layout == target) return dy;
  const std::string name = moved_name(dy.name, target.str());
  DistTensor<T> moved = world.redistribute(
      dy, target,
      {.tensor = name, .dense = dy.name, .exact = !dy.layout.has_partial(), .inputs = {dy.name}});
  moved.name = name;
  return moved;
}

// y = a + b on every rank's locals. REQUIRES: a and b have the same global shape and placement.
// Exact unless the inputs are Partial (a sum of addend sums is a reordered sum).
template <typename T>
DistTensor<T> add_sharded(const World<T>& world, const DistTensor<T>& a, const DistTensor<T>& b,
                          const std::string& output) {
  SHARDSIM_ASSERT(a.global == b.global && a.layout == b.layout,
                  "add: inputs differ in shape or placement");
  DistTensor<T> y = world.make(output, a.global, a.layout);
  world.for_each_rank([&](int r) { add_forward(a.local(r), b.local(r), y.local(r)); });
  zero_padding(y);
  world.compare_boundary({.op = op_label(OpKind::add),
                          .tensor = output,
                          .exact = !a.layout.has_partial(),
                          .inputs = {a.name, b.name}},
                         y);
  return y;
}

}  // namespace shardsim
