// One output's sum of products, the accumulator of the contraction kernels (projections, linear).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/parallel.hpp"
#include "core/scalar.hpp"

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

// DotSum<T>::Operand at dd/qd (values unpacked once for many exact dots); a placeholder that is
// never used for the other types, so kernels can declare one in code shared by all types.
template <typename T>
struct DotOperandOf {
  using type = char;
};
template <typename R>
struct DotOperandOf<Expansion<R>> {
  using type = typename ExactDot<R>::Operand;
};
template <typename T>
using DotOperand = typename DotOperandOf<T>::type;

// `count` vectors of n values each, unpacked once at dd/qd (DotOperand) for the exact dots that
// reuse them: the weights of every output, or a head's keys and values for every query row.
// Empty at the other types, whose kernels read the tensors directly.
template <typename T>
class DotOperands {
 public:
  // Vector v holds at(v, 0), ..., at(v, n - 1) (the vectors concurrently: parallel.hpp).
  template <typename At>
  void assign(std::int64_t count, std::int64_t n, At at) {
    if constexpr (kIsExpansion<T>) {
      operands_.resize(static_cast<std::size_t>(count));
      parallel_for(count, [&](std::int64_t v) {
        operands_[static_cast<std::size_t>(v)].assign(
            n, [&](std::int64_t i) -> const T& { return at(v, i); });
      });
    }
  }
  const DotOperand<T>& operator[](std::int64_t v) const {
    return operands_[static_cast<std::size_t>(v)];
  }

 private:
  std::vector<DotOperand<T>> operands_;
};

// At dd/qd, a matrix product of exact dots: for every r < rows and c < cols, out(r, c, sum) with
// `sum` (a DotSum<T>) holding the products a(r, i) b(c, i) for i < n; out may add_value() more
// before it takes sum.value(), the exact sum rounded once (ExactDot). Every row of a and of b is
// unpacked once; rows go in chunks of 8, the chunks concurrently, and each chunk takes every c in
// turn over its rows. The value of a sum does not depend on any of this order; the IEEE sum of
// the leading products (the non-finite fallback) runs over i ascending, as an element-wise loop.
template <typename T, typename A, typename B, typename Out>
void exact_products(std::int64_t rows, std::int64_t cols, std::int64_t n, A a, B b, Out out) {
  constexpr std::int64_t kChunk = 8;
  DotOperands<T> b_rows;
  b_rows.assign(cols, n, b);
  parallel_for((rows + kChunk - 1) / kChunk, [&](std::int64_t chunk) {
    const std::int64_t first = chunk * kChunk, count = std::min(kChunk, rows - first);
    DotOperands<T> a_rows;
    a_rows.assign(count, n,
                  [&](std::int64_t r, std::int64_t i) -> const T& { return a(first + r, i); });
    DotSum<T> sum;
    for (std::int64_t c = 0; c < cols; ++c) {
      for (std::int64_t r = 0; r < count; ++r) {
        sum.clear();
        sum.add(a_rows[r], b_rows[c]);
        out(first + r, c, sum);
      }
    }
  });
}

// Whether the ascending kv indices `keys` are one contiguous range.
inline bool contiguous(const std::vector<std::int64_t>& keys) {
  return keys.empty() || keys.back() - keys.front() + 1 == static_cast<std::int64_t>(keys.size());
}

}  // namespace shardsim::detail
