// Tests for LayerNorm's f32/f64 row-sum order (core/lane_sums.hpp, docs/threads-and-memory.md "Row
// sums in lanes"): a hand-derived known answer that tells the lane order from the sequential one,
// and every kernel on contiguous and strided rows of many lengths against the textbook formulas
// written with the order spelled out (tensor_test::lane_sum), bit for bit, under each instruction
// set the CPU has.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/lane_isa.hpp"
#include "lane_isa_test_support.hpp"
#include "ops/layer_norm/layer_norm.hpp"
#include "tensor_test_support.hpp"

using lane_test::EachIsa;
using shardsim::LaneIsa;
using shardsim::LayerNormParams;
using shardsim::LayerNormSaved;
using shardsim::Shape;
using shardsim::Tensor;
using tensor_test::lane_sum;
using tensor_test::make;
using tensor_test::normal;
using tensor_test::seeded;
using tensor_test::uniform;

namespace {

// Forward and backward of a [5, h, inner] tensor normalized over its middle axis against the
// textbook formulas with the lane order, bitwise. inner = 1: contiguous rows (vector loads);
// inner = 2: rows strided by 2 (gathered). 5 * inner rows: one block of four side by side and a
// single row (inner = 1), or two blocks and two single rows (inner = 2).
template <typename T>
void check_rows(std::int64_t h, std::int64_t inner, std::uint64_t seed) {
  const std::int64_t rows = 5 * inner;
  const Shape shape({{"seq", 5}, {"hidden", h}, {"batch", inner}});
  const auto x = seeded<T>(shape, normal(0.5, 2.0), seed);
  const auto dy = seeded<T>(shape, normal(0.0, 1.0), seed + 1);
  const auto w = seeded<T>(Shape({{"hidden", h}}), uniform(0.5, 1.5), seed + 2);
  const auto b = seeded<T>(Shape({{"hidden", h}}), uniform(-0.25, 0.25), seed + 3);
  LayerNormParams params;
  Tensor<T> y, dx, dw(w.shape()), db(b.shape());
  LayerNormSaved<T> saved;
  shardsim::layer_norm_forward(x, &w, &b, params, y, saved);
  shardsim::layer_norm_backward(dy, x, &w, saved, params, dx, &dw, &db);
  std::vector<T> ref_dw(static_cast<std::size_t>(h), T(0)), ref_db(ref_dw);
  int mismatches = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    // Row r is (seq o, batch j) = (r / inner, r % inner); its element i is at (o h + i) inner + j.
    const auto at = [&](std::int64_t i) { return ((r / inner) * h + i) * inner + r % inner; };
    const T mean = lane_sum(h, [&](std::int64_t i) { return x[at(i)]; }) / T(h);
    const T sum_sq =
        lane_sum(h, [&](std::int64_t i) { return (x[at(i)] - mean) * (x[at(i)] - mean); });
    const T rstd = T(1) / std::sqrt(sum_sq / T(h) + T(params.eps));
    mismatches += saved.mean[r] != mean;
    mismatches += saved.rstd[r] != rstd;
    const auto norm = [&](std::int64_t i) { return (x[at(i)] - mean) * rstd; };
    const T dnorm_mean = lane_sum(h, [&](std::int64_t i) { return dy[at(i)] * w[i]; }) / T(h);
    const T dnorm_norm_mean =
        lane_sum(h, [&](std::int64_t i) { return (dy[at(i)] * w[i]) * norm(i); }) / T(h);
    for (std::int64_t i = 0; i < h; ++i) {
      mismatches += y[at(i)] != norm(i) * w[i] + b[i];
      mismatches +=
          dx[at(i)] != ((dy[at(i)] * w[i] - dnorm_mean) - norm(i) * dnorm_norm_mean) * rstd;
      ref_db[static_cast<std::size_t>(i)] += dy[at(i)];
      ref_dw[static_cast<std::size_t>(i)] += dy[at(i)] * norm(i);
    }
  }
  for (std::int64_t i = 0; i < h; ++i) {
    mismatches += dw[i] != ref_dw[static_cast<std::size_t>(i)];
    mismatches += db[i] != ref_db[static_cast<std::size_t>(i)];
  }
  CHECK(mismatches == 0);
}

}  // namespace

TEST_CASE("LayerNorm row sums: the lane order, not the sequential one (known answer)",
          "[layer_norm][lanes]") {
  // x = [2^24, 1, 1, 1, 1, 1, 1, 1, 1] in f32 (9 positions). Sequentially every + 1 is lost:
  // 2^24 + 1 lies halfway between 2^24 and 2^24 + 2 and rounds to the even 2^24, eight times.
  // In lanes: lane 0 holds positions 0 and 8, 2^24 + 1 -> 2^24; lanes 1..7 hold 1 each. Tree:
  // l0 + l1 = 2^24 + 1 -> 2^24; l2 + l3 = 2; (2^24) + 2 = 2^24 + 2 (exact: f32 steps by 2
  // there); (l4 + l5) + (l6 + l7) = 4; total 2^24 + 6 = 16777222, exact. sum_sq: the squares
  // are 2^48 and eight 1s; f32's spacing at 2^48 is 2^25, so 2^48 + 1, 2^48 + 2 and 2^48 + 4
  // all round to 2^48: sum_sq = 2^48 (in either order).
  // f64: the same with 2^53 (spacing 2 above it): sum = 2^53 + 6.
  const Shape shape({{"seq", 1}, {"hidden", 9}});
  LayerNormParams params;
  EachIsa isas;
  for (LaneIsa isa : isas.all()) {
    shardsim::set_lane_isa(isa);
    const auto x32 = make<float>(shape, {0x1p24, 1, 1, 1, 1, 1, 1, 1, 1});
    Tensor<float> sum32, sum_sq32;
    shardsim::layer_norm_partial_sums(x32, params, 9, sum32, sum_sq32);
    CHECK(sum32[0] == 16777222.0f);
    CHECK(sum_sq32[0] == 0x1p48f);
    float sequential = 0;
    for (std::int64_t i = 0; i < 9; ++i) sequential += x32[i];
    CHECK(sequential == 0x1p24f);  // the order matters for this input

    const auto x64 = make<double>(shape, {0x1p53, 1, 1, 1, 1, 1, 1, 1, 1});
    Tensor<double> sum64, sum_sq64;
    shardsim::layer_norm_partial_sums(x64, params, 9, sum64, sum_sq64);
    CHECK(sum64[0] == 0x1p53 + 6);
  }
}

TEST_CASE(
    "f32 and f64 LayerNorm on contiguous and strided rows equals the lane-order formulas, "
    "bitwise, on every instruction set",
    "[layer_norm][lanes]") {
  // Lengths around the lane width (1, 7, 8, 9, 16, 17), a realistic one with a tail (1027)
  // and one with no vector group at all (3).
  EachIsa isas;
  for (LaneIsa isa : isas.all()) {
    shardsim::set_lane_isa(isa);
    INFO("isa " << (isa == LaneIsa::avx2 ? "avx2" : "sse2"));
    for (std::int64_t h : {1, 3, 7, 8, 9, 16, 17, 1027}) {
      for (std::int64_t inner : {1, 2}) {
        INFO("h " << h << ", inner " << inner);
        const auto seed = static_cast<std::uint64_t>(h * 4 + inner);
        check_rows<float>(h, inner, 100 + seed);
        check_rows<double>(h, inner, 200 + seed);
      }
    }
  }
}

TEST_CASE("LayerNorm partial sums and moments over valid positions use the lane order",
          "[layer_norm][lanes]") {
  // A padded slice: positions [valid, 21) are padding and must not enter the sums.
  const std::int64_t h = 21, valid = 19, rows = 5;
  const Shape shape({{"seq", rows}, {"hidden", h}});
  const auto x = seeded<float>(shape, normal(0.25, 3.0), 7);
  LayerNormParams params;
  EachIsa isas;
  for (LaneIsa isa : isas.all()) {
    shardsim::set_lane_isa(isa);
    Tensor<float> sum, sum_sq, mean, m2;
    shardsim::layer_norm_partial_sums(x, params, valid, sum, sum_sq);
    shardsim::layer_norm_partial_moments(x, params, valid, mean, m2);
    for (std::int64_t r = 0; r < rows; ++r) {
      const auto at = [&](std::int64_t i) { return x[r * h + i]; };
      const float row_sum = lane_sum(valid, at);
      const float row_mean = row_sum / float(valid);
      CHECK(sum[r] == row_sum);
      CHECK(sum_sq[r] == lane_sum(valid, [&](std::int64_t i) { return at(i) * at(i); }));
      CHECK(mean[r] == row_mean);
      CHECK(m2[r] == lane_sum(valid, [&](std::int64_t i) {
              return (at(i) - row_mean) * (at(i) - row_mean);
            }));
    }
  }
}
