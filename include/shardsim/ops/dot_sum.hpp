// One output's sum of products, the accumulator of the contraction kernels (projections, linear).
#pragma once

#include "shardsim/scalar.hpp"

namespace shardsim::detail {

// The sum of the add() products (and add_value() values) in the order of the calls.
//   f32, f64, mp and the narrow formats: the sequential in-place sum, each product and each
//     addition rounded once (mul_into, then add_into; at mp one allocation per DotSum, not per
//     multiply-add).
//   dd and qd: the exact sum rounded once (ExactDot, qd_dot.hpp), which does not depend on the
//     order. The translation units that instantiate kernels for dd/qd include qd_dot.hpp.
template <typename T>
class DotSum {
 public:
  void clear() { sum_ = 0; }
  void add(const T& a, const T& b) {
    mul_into(product_, a, b);
    add_into(sum_, sum_, product_);
  }
  void add_value(const T& v) { add_into(sum_, sum_, v); }
  const T& value() const { return sum_; }

 private:
  T sum_ = T(0), product_ = T(0);
};
template <typename R>
class DotSum<Expansion<R>> : public ExactDot<R> {};

}  // namespace shardsim::detail
