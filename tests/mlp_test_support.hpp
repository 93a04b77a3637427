// Helpers shared by the MLP-block tests (linear, gelu, dropout, mlp_block, activation_memory):
// rebuilding a global tensor from a DistTensor's metadata, bitwise comparison, seeded inputs and
// the placements every sharded test sweeps.
#pragma once

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "shardsim/mp.hpp"
#include "shardsim/rng.hpp"
#include "shardsim/scalar.hpp"
#include "shardsim/world.hpp"
#include "dist_test_support.hpp"

namespace mlp_test {

using shardsim::DistTensor;
using shardsim::Placement;
using shardsim::Shape;
using shardsim::Tensor;

using dist_test::assemble;
using dist_test::bitwise_equal;

// max |a - b| / max(max |b|, tiny), as a double.
template <typename T>
double normwise_relative_error(const Tensor<T>& a, const Tensor<T>& b) {
  REQUIRE(a.shape() == b.shape());
  double err = 0;
  double scale = 0;
  for (std::int64_t e = 0; e < a.numel(); ++e) {
    using std::abs;
    err = std::max(err, shardsim::ScalarTraits<T>::to_double(T(abs(T(a[e] - b[e])))));
    scale = std::max(scale, std::fabs(shardsim::ScalarTraits<T>::to_double(b[e])));
  }
  return err / std::max(scale, std::numeric_limits<double>::min());
}

// Unit roundoff u = 2^-p of T's p-bit significand.
template <typename T>
double unit_roundoff() {
  if constexpr (std::is_same_v<T, shardsim::Mp>) {
    return std::ldexp(1.0, -static_cast<int>(shardsim::mp_significand_bits()));
  } else {
    return std::ldexp(1.0, -std::numeric_limits<T>::digits);
  }
}

// f32-representable pseudo-random values (the runner's initialization), identical at every
// precision.
template <typename T>
Tensor<T> seeded(Shape shape, double low, double high, std::uint64_t seed) {
  shardsim::InitSpec spec;
  spec.low = low;
  spec.high = high;
  Tensor<T> t(std::move(shape));
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    t[i] = T(shardsim::init_value(spec, seed, static_cast<std::uint64_t>(i)));
  }
  return t;
}

template <typename T>
Tensor<T> values(Shape shape, const std::vector<double>& data) {
  std::vector<T> out;
  for (double v : data) out.push_back(T(v));
  return Tensor<T>(std::move(shape), std::move(out));
}

// Every split of `axis`.
inline std::vector<Placement> shards_of(const std::string& axis) {
  return {Placement::shard(axis), Placement::shard(axis, shardsim::SplitPolicy::balanced),
          Placement::shard(axis, shardsim::SplitPolicy::padded)};
}

}  // namespace mlp_test
