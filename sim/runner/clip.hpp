// Private to the runner: gradient-norm clipping (`clip_grad_norm = MAX`), as
// torch.nn.utils.clip_grad_norm_ with norm 2:
//   total = sqrt(S), S = the sum of squares of every gradient element;
//   coef  = MAX / (total + 1e-6), clamped to at most 1; every gradient is multiplied by coef.
// Orders. The oracle sums each parameter's gradient row-major, the parameters in declaration
// order, into one running sum. Each rank sums, in the same orders, the squares of the valid
// (non-padding) elements of every gradient it holds as a first replica (coordinate 0 on every
// Replicate dim, so each element counts once); that scalar is Partial on every mesh dim and is
// all-reduced dim by dim in mesh order (`all_reduce -> grad_norm.sq`), then every rank takes
// the root and the coefficient (`clip_grad_norm -> grad_norm`, `grad_norm.clip_coef`) and
// scales its local gradients. Gradients are clipped after their reduction (under fsdp: the
// shards), before any update.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "runner/replicas.hpp"
#include "runner/steps/step_env.hpp"

namespace shardsim {

namespace clip_parts {
inline const std::string norm = "grad_norm";
inline const std::string squares = "grad_norm.sq";
inline const std::string coef = "grad_norm.clip_coef";
}  // namespace clip_parts

// The clipping coefficient of a total norm: MAX / (total + 1e-6), at most 1.
template <typename T>
T clip_coefficient(const T& total, double max_norm) {
  const T coef = T(max_norm) / (total + T(1e-6));
  return coef < T(1) ? coef : T(1);
}

// `dense`: the oracle's gradient names, in declaration order; `sharded`: the ranks' gradient
// names (reduced: no Partial dim), in the same order. With `include_padding` (fault
// fsdp_clip_padding) the ranks also sum the padding positions of their locals.
// Returns the ranks' coefficient (scalar, Replicate).
template <typename T>
DistTensor<T> clip_gradients(const World<T>& world, StepEnv<T>& env, double max_norm,
                             const std::vector<std::string>& dense,
                             const std::vector<std::string>& sharded, bool include_padding) {
  using std::sqrt;
  const Shape scalar;
  const int ndim = world.mesh().ndim();
  T dense_squares = T(0);
  for (const std::string& name : dense) {
    for (const T& v : env.dense.at(name).values()) dense_squares += v * v;
  }
  const T dense_total = T(sqrt(dense_squares));
  const T dense_coef = clip_coefficient(dense_total, max_norm);
  env.dense[clip_parts::squares] = Tensor<T>(scalar, {dense_squares});
  env.dense[clip_parts::norm] = Tensor<T>(scalar, {dense_total});
  env.dense[clip_parts::coef] = Tensor<T>(scalar, {dense_coef});

  DistTensor<T> squares =
      world.make(clip_parts::squares, scalar, Layout::uniform(ndim, Placement::partial()));
  world.for_each_rank([&](int r) {
    T sum = T(0);
    for (const std::string& name : sharded) {
      const DistTensor<T>& grad = env.sharded.at(name);
      if (!is_first_replica(grad, r)) continue;
      const Tensor<T>& local = grad.local(r);
      if (include_padding) {
        for (const T& v : local.values()) sum += v * v;
        continue;
      }
      for_each_valid(local.shape(), local_box(grad, r), grad.global,
                     [&](std::int64_t i, std::int64_t) { sum += local[i] * local[i]; });
    }
    squares.local(r)[0] = sum;
  });
  for (int d = 0; d < ndim; ++d) {
    squares = world.on(d).all_reduce(squares, {.tensor = clip_parts::squares, .inputs = sharded});
  }
  DistTensor<T> total = world.make(clip_parts::norm, scalar, squares.layout);
  DistTensor<T> coef = world.make(clip_parts::coef, scalar, squares.layout);
  world.for_each_rank([&](int r) {
    total.local(r)[0] = T(sqrt(squares.local(r)[0]));
    coef.local(r)[0] = clip_coefficient(total.local(r)[0], max_norm);
  });
  world.compare_boundary({.op = "clip_grad_norm",
                          .tensor = clip_parts::norm,
                          .exact = true,
                          .inputs = {clip_parts::squares}},
                         total);
  world.compare_boundary({.op = "clip_grad_norm",
                          .tensor = clip_parts::coef,
                          .exact = true,
                          .inputs = {clip_parts::norm}},
                         coef);
  for (const std::string& name : dense) {
    for (T& v : env.dense.at(name).values()) v = v * dense_coef;
  }
  for (const std::string& name : sharded) {
    DistTensor<T>& grad = env.sharded.at(name);
    world.for_each_rank([&](int r) {
      for (T& v : grad.local(r).values()) v = v * coef.local(r)[0];
    });
  }
  return coef;
}

}  // namespace shardsim
