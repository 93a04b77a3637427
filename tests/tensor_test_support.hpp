// Tensor helpers of the kernel and plan tests: literal and seeded f32-representable tensors,
// unit roundoff per type, normwise errors, comparison of a sharded tensor against a dense one by
// global identity, and the splits of an axis every sharded test sweeps.
#pragma once

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "dist_test_support.hpp"
#include "core/dist_tensor.hpp"
#include "core/mp.hpp"
#include "core/rng.hpp"
#include "core/scalar.hpp"
#include "core/world.hpp"

namespace tensor_test {

using shardsim::DistTensor;
using shardsim::Mp;
using shardsim::Placement;
using shardsim::Shape;
using shardsim::Tensor;

template <typename T>
Tensor<T> make(Shape shape, const std::vector<double>& values) {
  std::vector<T> data;
  for (double v : values) data.push_back(T(v));
  return Tensor<T>(std::move(shape), std::move(data));
}

// f32-representable pseudo-random values (the runner's initialization), identical at every
// precision.
template <typename T>
Tensor<T> seeded(Shape shape, shardsim::InitSpec spec, std::uint64_t seed) {
  Tensor<T> t(std::move(shape));
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    t[i] = T(shardsim::init_value(spec, seed, static_cast<std::uint64_t>(i)));
  }
  return t;
}

inline shardsim::InitSpec normal(double mean, double stddev) {
  shardsim::InitSpec spec;
  spec.dist = shardsim::InitDist::normal;
  spec.mean = mean;
  spec.stddev = stddev;
  return spec;
}

inline shardsim::InitSpec uniform(double low, double high) {
  shardsim::InitSpec spec;
  spec.low = low;
  spec.high = high;
  return spec;
}

// Uniform(low, high) values from `seed`.
template <typename T>
Tensor<T> seeded(Shape shape, double low, double high, std::uint64_t seed) {
  return seeded<T>(std::move(shape), uniform(low, high), seed);
}

// Normal(0, stddev) values from `seed` (the attention and RoPE tests' inputs).
template <typename T>
Tensor<T> seeded_normal(Shape shape, std::uint64_t seed, double stddev = 1.0) {
  return seeded<T>(std::move(shape), normal(0.0, stddev), seed);
}

// Unit roundoff u = 2^-p of the type's p-bit significand (round to nearest).
// A LayerNorm row sum at f32/f64 in the lane order of core/lane_sums.hpp, written independently
// of it: eight scalar lanes, lane i % 8 adding term(i) over ascending i from +0, then the fixed
// tree ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)).
template <typename Term>
auto lane_sum(std::int64_t n, Term&& term) {
  using T = decltype(term(std::int64_t{0}));
  T lane[8] = {};
  for (std::int64_t i = 0; i < n; ++i) lane[i % 8] += term(i);
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

template <typename T>
double unit_roundoff() {
  if constexpr (std::is_same_v<T, Mp>) {
    return std::ldexp(1.0, -static_cast<int>(shardsim::mp_significand_bits()));
  } else {
    return std::ldexp(1.0, -std::numeric_limits<T>::digits);
  }
}

template <typename T>
double to_double(const T& v) {
  return shardsim::ScalarTraits<T>::to_double(v);
}

using dist_test::assemble;
using dist_test::bitwise_equal;
using dist_test::for_each_valid;

// The dense value of a Partial tensor: the ranks' addends summed in rank order.
template <typename T>
Tensor<T> partial_sum(const DistTensor<T>& dist) {
  Tensor<T> sum = dist.local(0);
  for (int r = 1; r < dist.ranks(); ++r) {
    for (std::int64_t e = 0; e < sum.numel(); ++e) sum[e] += dist.local(r)[e];
  }
  return sum;
}

// Every compared element of `dist` is bitwise the dense value at its global position.
template <typename T>
bool matches_bitwise(const DistTensor<T>& dist, const Tensor<T>& dense) {
  REQUIRE(dist.global == dense.shape());
  bool all = true;
  for_each_valid(dist, [&](int r, std::int64_t local, std::int64_t global) {
    all = all && shardsim::ScalarTraits<T>::identical(dist.local(r)[local], dense[global]);
  });
  return all;
}

// max |a - b| / max(max |b|, tiny), as a double.
template <typename T>
double normwise_relative_error(const Tensor<T>& a, const Tensor<T>& b) {
  REQUIRE(a.shape() == b.shape());
  double err = 0;
  double scale = 0;
  for (std::int64_t e = 0; e < a.numel(); ++e) {
    using std::abs;
    err = std::max(err, to_double(T(abs(T(a[e] - b[e])))));
    scale = std::max(scale, std::fabs(to_double(b[e])));
  }
  return err / std::max(scale, std::numeric_limits<double>::min());
}

// max |s - d| / max |d| over the compared elements (normwise relative error), as a double.
template <typename T>
double normwise_error(const DistTensor<T>& dist, const Tensor<T>& dense) {
  REQUIRE(dist.global == dense.shape());
  using std::abs;
  double scale = 0;
  for (std::int64_t e = 0; e < dense.numel(); ++e)
    scale = std::max(scale, std::fabs(to_double(dense[e])));
  double worst = 0;
  const DistTensor<T>* source = &dist;
  DistTensor<T> summed;
  if (dist.layout.on(0).is_partial()) {
    summed = dist;
    summed.layout = shardsim::Layout({shardsim::Placement::replicate()});
    summed.locals.assign(1, partial_sum(dist));
    source = &summed;
  }
  for_each_valid(*source, [&](int r, std::int64_t local, std::int64_t global) {
    worst = std::max(worst, to_double(T(abs(T(source->local(r)[local] - dense[global])))));
  });
  return scale == 0 ? worst : worst / scale;
}

// Every split of `axis`.
inline std::vector<Placement> shards_of(const std::string& axis) {
  return {Placement::shard(axis), Placement::shard(axis, shardsim::SplitPolicy::balanced),
          Placement::shard(axis, shardsim::SplitPolicy::padded)};
}

}  // namespace tensor_test
