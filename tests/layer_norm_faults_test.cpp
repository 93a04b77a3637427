// Tests for the LayerNorm fault policy (ops/layer_norm_faults.hpp) as the kernels take it: the
// no-fault policy is the dense oracle, layer_norm_stats then layer_norm_apply is the fused
// forward, and each fault replaces exactly its piece of the formula, bit for bit.
#include "ops/layer_norm/layer_norm_faults.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "core/mp.hpp"
#include "core/world.hpp"
#include "ops/layer_norm/layer_norm.hpp"
#include "ops/layer_norm/layer_norm_plan.hpp"
#include "tensor_test_support.hpp"

using shardsim::LayerNormFaults;
using shardsim::LayerNormParams;
using shardsim::LayerNormSaved;
using shardsim::Mp;
using shardsim::Shape;
using shardsim::Tensor;
using tensor_test::normal;
using tensor_test::seeded;
using tensor_test::uniform;

namespace {

template <typename T>
bool identical(const Tensor<T>& a, const Tensor<T>& b) {
  REQUIRE(a.shape() == b.shape());
  for (std::int64_t e = 0; e < a.numel(); ++e) {
    if (!shardsim::ScalarTraits<T>::identical(a[e], b[e])) return false;
  }
  return true;
}

// The inputs of the tests below: hidden is the middle axis (rows are strided) and 3 * 2 = 6 rows
// make one block of four rows reduced side by side and a tail of two single rows.
template <typename T>
struct Inputs {
  Shape shape = Shape({{"seq", 3}, {"hidden", 9}, {"batch", 2}});
  Tensor<T> x = seeded<T>(shape, normal(0.5, 2.0), 51);
  Tensor<T> weight = seeded<T>(Shape({{"hidden", 9}}), uniform(0.5, 1.5), 52);
  Tensor<T> bias = seeded<T>(Shape({{"hidden", 9}}), uniform(-0.25, 0.25), 53);
};

// A row sum in LayerNorm's row-sum order (ops/layer_norm.hpp): the lanes at f32/f64
// (tensor_test::lane_sum), one accumulator over ascending i at mp.
template <typename T, typename Term>
T row_sum(std::int64_t n, Term&& term) {
  if constexpr (std::is_same_v<T, Mp>) {
    T sum = T(0);
    for (std::int64_t i = 0; i < n; ++i) sum = sum + term(i);
    return sum;
  } else {
    return tensor_test::lane_sum(n, term);
  }
}

// The faulty formula one row at a time, written out with the scalar type's own operators
// (independently of the kernel's blocks, policy and in-place arithmetic). x's rows are
// (seq, batch) positions; element i of row (o, j) is x[(o * 9 + i) * 2 + j].
template <typename T>
void textbook(const Inputs<T>& in, const LayerNormFaults& faults, const T* shared_mean,
              const LayerNormParams& params, Tensor<T>& y, LayerNormSaved<T>& saved) {
  using std::sqrt;
  const int hidden = 9;
  y = Tensor<T>(in.shape);
  saved.mean = Tensor<T>(in.shape.without("hidden"));
  saved.rstd = Tensor<T>(in.shape.without("hidden"));
  for (std::int64_t o = 0; o < 3; ++o) {
    for (std::int64_t j = 0; j < 2; ++j) {
      auto at = [&](std::int64_t i) { return (o * hidden + i) * 2 + j; };
      T mean = T(0);  // rmsnorm_substituted: no mean
      if (shared_mean) {
        mean = *shared_mean;
      } else if (!faults.rmsnorm_substituted) {
        mean = row_sum<T>(hidden, [&](std::int64_t i) { return T(in.x[at(i)]); }) / T(hidden);
      }
      const T sum_sq = row_sum<T>(
          hidden, [&](std::int64_t i) { return T((in.x[at(i)] - mean) * (in.x[at(i)] - mean)); });
      const T var = sum_sq / T(faults.unbiased_variance ? hidden - 1 : hidden);
      const T eps = T(params.eps);
      const T rstd = faults.eps_mismatch ? T(T(1) / (sqrt(var) + eps)) : T(T(1) / sqrt(var + eps));
      saved.mean[o * 2 + j] = mean;
      saved.rstd[o * 2 + j] = rstd;
      for (int i = 0; i < hidden; ++i) {
        T norm = (in.x[at(i)] - mean) * rstd;
        if (faults.dtype_mismatch) norm = T(static_cast<float>(norm));
        y[at(i)] = norm * in.weight[i] + in.bias[i];
      }
    }
  }
}

}  // namespace

TEMPLATE_TEST_CASE("the row kernel with the no-fault policy is the dense oracle, bit for bit",
                   "[layer_norm][faults]", float, double, Mp) {
  shardsim::set_mp_precision(256);
  const Inputs<TestType> in;
  LayerNormParams params;
  Tensor<TestType> y_oracle, y_kernel, y_split;
  LayerNormSaved<TestType> oracle, kernel, split;
  shardsim::layer_norm_forward(in.x, &in.weight, &in.bias, params, y_oracle, oracle);
  shardsim::layer_norm_forward(in.x, &in.weight, &in.bias, params, LayerNormFaults{}, y_kernel,
                               kernel);
  // The two passes called one after the other, as the hidden-sharded plans call the second.
  shardsim::layer_norm_stats(in.x, params, LayerNormFaults{}, split);
  shardsim::layer_norm_apply(in.x, &in.weight, &in.bias, split, params, LayerNormFaults{}, 9,
                             y_split);
  CHECK(identical(y_kernel, y_oracle));
  CHECK(identical(kernel.mean, oracle.mean));
  CHECK(identical(kernel.rstd, oracle.rstd));
  CHECK(identical(y_split, y_oracle));
  CHECK(identical(split.mean, oracle.mean));
  CHECK(identical(split.rstd, oracle.rstd));
  // And the oracle is the header's formula.
  Tensor<TestType> y_textbook;
  LayerNormSaved<TestType> textbook_saved;
  textbook(in, LayerNormFaults{}, static_cast<const TestType*>(nullptr), params, y_textbook,
           textbook_saved);
  CHECK(identical(y_oracle, y_textbook));
  CHECK(identical(oracle.mean, textbook_saved.mean));
  CHECK(identical(oracle.rstd, textbook_saved.rstd));
}

TEMPLATE_TEST_CASE("each LayerNorm fault replaces exactly its piece of the formula, bit for bit",
                   "[layer_norm][faults]", float, double, Mp) {
  shardsim::set_mp_precision(256);
  const Inputs<TestType> in;
  LayerNormParams params;
  params.eps = 0.25;  // large enough that eps inside or outside the sqrt differ visibly
  Tensor<TestType> y_clean;
  LayerNormSaved<TestType> clean;
  shardsim::layer_norm_forward(in.x, &in.weight, &in.bias, params, y_clean, clean);
  const TestType shared_mean = TestType(0.375);
  for (const std::string name : {"combine_token_means", "rmsnorm_substituted", "unbiased_variance",
                                 "eps_mismatch", "dtype_mismatch"}) {
    INFO(name);
    LayerNormFaults faults;
    faults.combine_token_means = name == "combine_token_means";
    faults.rmsnorm_substituted = name == "rmsnorm_substituted";
    faults.unbiased_variance = name == "unbiased_variance";
    faults.eps_mismatch = name == "eps_mismatch";
    faults.dtype_mismatch = name == "dtype_mismatch";
    const TestType* shared = faults.combine_token_means ? &shared_mean : nullptr;
    Tensor<TestType> y, y_expected;
    LayerNormSaved<TestType> saved, expected;
    shardsim::layer_norm_forward(in.x, &in.weight, &in.bias, params, faults, y, saved, shared);
    textbook(in, faults, shared, params, y_expected, expected);
    CHECK(identical(y, y_expected));
    CHECK(identical(saved.mean, expected.mean));
    CHECK(identical(saved.rstd, expected.rstd));
    // The fault shows, except dtype_mismatch in an f32 run, where the cast is the identity.
    if (std::is_same_v<TestType, float> && faults.dtype_mismatch) {
      CHECK(identical(y, y_clean));
    } else {
      CHECK_FALSE(identical(y, y_clean));
    }
  }
}

TEMPLATE_TEST_CASE("the policy's variance and rstd pieces: known answers", "[layer_norm][faults]",
                   float, double, Mp) {
  shardsim::set_mp_precision(256);
  using T = TestType;
  LayerNormFaults none;
  LayerNormFaults unbiased;
  unbiased.unbiased_variance = true;
  LayerNormFaults eps_outside;
  eps_outside.eps_mismatch = true;
  CHECK(none.variance_divisor(4) == 4);
  CHECK(unbiased.variance_divisor(4) == 3);
  // A biased variance 2 over 4 features is the unbiased 2 * 4 / 3 = 8 / 3: the product is
  // exact, so the result is 8 / 3 correctly rounded.
  CHECK(none.variance_from_biased(T(2), 4) == T(2));
  CHECK(unbiased.variance_from_biased(T(2), 4) == T(8) / T(3));
  // var = 3.75, eps = 0.25: 1 / sqrt(4) = 0.5 exactly. eps outside: 1 / (sqrt(3.75) + 0.25).
  // var = 4, eps = 0.5 outside: 1 / (2 + 0.5) = 1 / 2.5, one rounding.
  CHECK(none.rstd(T(3.75), T(0.25)) == T(0.5));
  CHECK(eps_outside.rstd(T(4), T(0.5)) == T(1) / T(2.5));
  CHECK(eps_outside.rstd(T(3.75), T(0.25)) != T(0.5));
  // dtype_mismatch rounds through float: 0.1 is not a float, so only an f32 value survives.
  T value = T(0.1);
  LayerNormFaults narrow;
  narrow.dtype_mismatch = true;
  none.round_normalized(value);
  CHECK(value == T(0.1));
  narrow.round_normalized(value);
  CHECK(value == T(static_cast<float>(0.1)));
}

TEST_CASE("the row-sharded plan's boundary names, with and without combine_token_means",
          "[layer_norm][faults]") {
  // The report prints these names and the step stores the oracle under them: the plan builds
  // them with part_name from layer_norm_parts. Entries are "tensor <- dense"; the fault's two
  // all-reduced scalars come first and have no oracle.
  const Inputs<double> in;
  shardsim::World<double> world(2, shardsim::ReduceOrder::rank, {});
  std::vector<std::string> seen;
  world.set_hook([&](const shardsim::BoundaryLabel& label, const shardsim::DistTensor<double>&) {
    seen.push_back(label.tensor + " <- " + (label.has_oracle ? label.dense_name() : "none"));
    return true;
  });
  const auto x_dist = shardsim::distribute("x", in.x, shardsim::Placement::shard("seq"), 2);
  shardsim::LayerNormShardedSaved<double> saved;
  using Names = std::vector<std::string>;
  shardsim::layer_norm_row_sharded<double>(world, x_dist, nullptr, nullptr, LayerNormParams{}, "y",
                                           saved);
  CHECK(seen == Names{"y.mean <- y.mean", "y.rstd <- y.rstd", "y <- y"});
  seen.clear();
  LayerNormFaults faults;
  faults.combine_token_means = true;
  shardsim::layer_norm_row_sharded<double>(world, x_dist, nullptr, nullptr, LayerNormParams{}, "y",
                                           saved, faults);
  CHECK(seen == Names{"y.token_mean_sum <- none", "y.token_count <- none", "y.mean <- y.mean",
                      "y.rstd <- y.rstd", "y <- y"});
}
