// Tests for ops/layer_norm_hidden_plan.hpp: LayerNorm on an input sharded on the normalized
// axis, with the three statistics modes (sum_sumsq, welford, redistribute), forward and
// backward, compared with the dense oracle for every split and N in 1..5; the Welford merge;
// and the documented cancellation risk of sum_sumsq.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "core/world.hpp"
#include "ops/layer_norm/layer_norm.hpp"
#include "ops/layer_norm/layer_norm_hidden_plan.hpp"
#include "scenario/scenario.hpp"
#include "tensor_test_support.hpp"

using shardsim::DistTensor;
using shardsim::HiddenStats;
using shardsim::LayerNormParams;
using shardsim::LayerNormSaved;
using shardsim::Mp;
using shardsim::Placement;
using shardsim::Shape;
using shardsim::SplitPolicy;
using shardsim::Tensor;
using tensor_test::make;
using tensor_test::seeded;

// Known answer: {1, 2} merged with {3, 4, 5}.
//   a: n = 2, mean = 1.5, M2 = 0.25 + 0.25 = 0.5;  b: n = 3, mean = 4, M2 = 1 + 0 + 1 = 2.
//   all five: n = 5, mean = 15 / 5 = 3, M2 = 4 + 1 + 0 + 1 + 4 = 10.
// Chan: delta = 2.5, mean = 1.5 + 2.5 * (3/5), M2 = 2.5 + 6.25 * (6/5). 3/5 and 6/5 are inexact
// in binary, each rounding (and the products and sums) adds at most u relative: within 4 ulps.
TEMPLATE_TEST_CASE("welford_merge known answer", "[layer_norm][hidden]", float, double) {
  TestType count = 2, mean = 1.5, m2 = 0.5;
  shardsim::welford_merge(count, mean, m2, TestType(3), TestType(4), TestType(2));
  CHECK(count == TestType(5));
  CHECK(shardsim::ulp_distance(mean, TestType(3)) <= 4);
  CHECK(shardsim::ulp_distance(m2, TestType(10)) <= 4);
}

TEMPLATE_TEST_CASE("welford_merge with an empty side is the identity, bit for bit",
                   "[layer_norm][hidden]", float, double, Mp) {
  shardsim::set_mp_precision(256);
  // 0.1 is inexact: a formula evaluated with n_b = 0 could still perturb it; the merge must not.
  TestType count = 3, mean = TestType(0.1), m2 = TestType(0.7);
  shardsim::welford_merge(count, mean, m2, TestType(0), TestType(0), TestType(0));
  CHECK((count == TestType(3) && mean == TestType(0.1) && m2 == TestType(0.7)));
  TestType empty_count = 0, empty_mean = 0, empty_m2 = 0;
  shardsim::welford_merge(empty_count, empty_mean, empty_m2, count, mean, m2);
  CHECK((empty_count == count && empty_mean == mean && empty_m2 == m2));
}

namespace {

template <typename T>
struct DenseLayerNorm {
  Tensor<T> y, dx, dweight, dbias;
  LayerNormSaved<T> saved;
};

template <typename T>
DenseLayerNorm<T> dense_layer_norm(const Tensor<T>& x, const Tensor<T>& w, const Tensor<T>& b,
                                   const Tensor<T>& dy, const LayerNormParams& params) {
  DenseLayerNorm<T> d;
  shardsim::layer_norm_forward(x, &w, &b, params, d.y, d.saved);
  d.dweight = Tensor<T>(w.shape());
  d.dbias = Tensor<T>(b.shape());
  shardsim::layer_norm_backward(dy, x, &w, d.saved, params, d.dx, &d.dweight, &d.dbias);
  return d;
}

}  // namespace

TEMPLATE_TEST_CASE("hidden-sharded LayerNorm agrees with the dense oracle in every mode",
                   "[layer_norm][hidden][sharded]", float, double, Mp) {
  shardsim::set_mp_precision(256);
  // 18 features: 5,5,5,3 over 4 ranks (chunk); 5 features: 2,2,1,0 (an empty shard).
  const std::int64_t hidden = GENERATE(18, 5);
  const Shape shape({{"batch", 2}, {"seq", 5}, {"hidden", hidden}});
  const Shape param({{"hidden", hidden}});
  const auto x = seeded<TestType>(shape, tensor_test::normal(0.5, 2.0), 31);
  const auto dy = seeded<TestType>(shape, tensor_test::normal(0.0, 1.0), 32);
  const auto w = seeded<TestType>(param, tensor_test::uniform(0.5, 1.5), 33);
  const auto b = seeded<TestType>(param, tensor_test::uniform(-0.25, 0.25), 34);
  LayerNormParams params;
  const DenseLayerNorm<TestType> dense = dense_layer_norm(x, w, b, dy, params);
  // sum_sumsq and welford regroup 18-term row sums (|mean| = 0.5 < std = 2, so sum_sumsq loses
  // at most ~2 bits to cancellation) and the 10-row sums of the backward reductions; each output
  // is a handful of operations on them. The errors stay within a few dozen u of the normwise
  // scale; 2^10 u is a wide margin that is still 2^-247 at mp256, inside 2^-(bits-16).
  const double tol = 1024 * tensor_test::unit_roundoff<TestType>();
  for (HiddenStats mode :
       {HiddenStats::sum_sumsq, HiddenStats::welford, HiddenStats::redistribute}) {
    for (SplitPolicy split : {SplitPolicy::chunk, SplitPolicy::balanced, SplitPolicy::padded}) {
      for (int ranks = 1; ranks <= 5; ++ranks) {
        const Placement placement = Placement::shard("hidden", split);
        INFO("mode " << static_cast<int>(mode) << ", " << placement.str() << " over " << ranks
                     << " ranks");
        const shardsim::World<TestType> world(ranks, shardsim::ReduceOrder::rank, {});
        const auto x_dist = shardsim::distribute("x", x, placement, ranks);
        const auto w_dist = shardsim::distribute("w", w, placement, ranks);
        const auto b_dist = shardsim::distribute("b", b, placement, ranks);
        const auto dy_dist = shardsim::distribute("dy", dy, placement, ranks);
        shardsim::LayerNormHiddenSaved<TestType> saved;
        const DistTensor<TestType> y_dist = shardsim::layer_norm_hidden_sharded(
            world, x_dist, &w_dist, &b_dist, params, mode, "seq", {}, "y", saved);
        CHECK(y_dist.layout.on(0) == placement);
        const auto grads = shardsim::layer_norm_hidden_sharded_backward(
            world, dy_dist, x_dist, &w_dist, &b_dist, params, mode, "seq", {}, saved, "dx", "dw",
            "db", "dx");
        CHECK(grads.dx.layout.on(0) == placement);
        if (mode == HiddenStats::redistribute) {
          // Data movement plus the row-sharded plan: the dense arithmetic, bit for bit.
          CHECK(tensor_test::matches_bitwise(y_dist, dense.y));
          CHECK(tensor_test::matches_bitwise(saved.stats.mean, dense.saved.mean));
          CHECK(tensor_test::matches_bitwise(saved.stats.rstd, dense.saved.rstd));
          CHECK(tensor_test::matches_bitwise(grads.dx, dense.dx));
          CHECK(grads.dweight.layout.on(0).is_partial());  // token-slice shares
        } else {
          CHECK(tensor_test::normwise_error(saved.stats.mean, dense.saved.mean) <= tol);
          CHECK(tensor_test::normwise_error(saved.stats.rstd, dense.saved.rstd) <= tol);
          CHECK(tensor_test::normwise_error(y_dist, dense.y) <= tol);
          CHECK(tensor_test::normwise_error(grads.dx, dense.dx) <= tol);
          // Parameter grads reduce over tokens only, locally: Shard(hidden) like the weight.
          CHECK(grads.dweight.layout.on(0) == placement);
          CHECK(grads.dbias.layout.on(0) == placement);
          // dbias is the row-order sum of dy over each rank's own features: the dense order.
          CHECK(tensor_test::matches_bitwise(grads.dbias, dense.dbias));
        }
        CHECK(tensor_test::normwise_error(grads.dweight, dense.dweight) <= tol);
        CHECK(tensor_test::normwise_error(grads.dbias, dense.dbias) <= tol);
      }
    }
  }
}

TEST_CASE("sum_sumsq cancels catastrophically when |mean| >> std, welford does not",
          "[layer_norm][hidden]") {
  shardsim::set_mp_precision(256);
  // Rows with mean 1e4 and std 1, in f32. The inputs are f32 values (ulp 2^-10 near 1e4); the
  // truth is their exact LayerNorm statistics, computed at 256 bits from the same values.
  const Shape shape({{"seq", 6}, {"hidden", 16}});
  const auto x32 = seeded<float>(shape, tensor_test::normal(1e4, 1.0), 41);
  Tensor<Mp> x_mp(shape);
  for (std::int64_t e = 0; e < x32.numel(); ++e) x_mp[e] = Mp(x32[e]);
  LayerNormParams params;
  Tensor<Mp> y_mp;
  LayerNormSaved<Mp> truth;
  shardsim::layer_norm_forward<Mp>(x_mp, nullptr, nullptr, params, y_mp, truth);

  const shardsim::World<float> world(4, shardsim::ReduceOrder::rank, {});
  const auto x_dist = shardsim::distribute("x", x32, Placement::shard("hidden"), 4);
  auto worst_rstd_error = [&](HiddenStats mode) {
    shardsim::LayerNormHiddenSaved<float> saved;
    shardsim::layer_norm_hidden_sharded<float>(world, x_dist, nullptr, nullptr, params, mode, "seq",
                                               {}, "y", saved);
    // rstd is Replicate (sum_sumsq, welford) or Shard(seq) (redistribute): visit every copy.
    double worst = 0;
    tensor_test::for_each_valid(saved.stats.rstd, [&](int r, std::int64_t local, std::int64_t row) {
      const double exact = shardsim::round_to_f64(truth.rstd[row]);
      worst = std::max(worst, std::fabs(saved.stats.rstd.local(r)[local] - exact) / exact);
    });
    return worst;
  };
  // sum_sumsq: SS / H and mean^2 are both ~1e8, where the f32 ulp is 8, so var = SS/H - mean^2
  // is a multiple of about 8 (or clamped to 0) where the truth is ~1: rstd is off by more than
  // half (var 8 gives rstd 0.35, var 0 gives 1/sqrt(eps) = 316, against ~1).
  CHECK(worst_rstd_error(HiddenStats::sum_sumsq) > 0.5);
  // welford: each shard centers its values (two-pass) before squaring, so only the inputs'
  // 2^-10 granularity against std 1 matters: a few times 2^-10; we allow 2^-5.
  CHECK(worst_rstd_error(HiddenStats::welford) < 0x1p-5);
  // redistribute runs the dense two-pass kernel on whole rows: the same few 2^-10.
  CHECK(worst_rstd_error(HiddenStats::redistribute) < 0x1p-5);
}

TEST_CASE("hidden_shard_local_stats normalizes each slice with the slice's own statistics",
          "[layer_norm][hidden][faults]") {
  // Two ranks, hidden = 4, one row x = [0, 0, 4, 4], eps = 0:
  //   full row: mean 2, var 4, rstd 0.5, y = [-1, -1, 1, 1];
  //   local slices [0, 0] and [4, 4] are constant: their own mean is 0 and 4, var 0, so with
  //   eps = 0 rstd = inf and y = 0 * inf = NaN: nothing like the full-row answer.
  const auto x = make<double>(Shape({{"seq", 1}, {"hidden", 4}}), {0, 0, 4, 4});
  LayerNormParams params;
  params.eps = 0;
  const shardsim::World<double> world(2, shardsim::ReduceOrder::rank, {});
  const auto x_dist = shardsim::distribute("x", x, Placement::shard("hidden"), 2);
  shardsim::LayerNormHiddenSaved<double> saved;
  shardsim::LayerNormFaults faults;
  const auto good = shardsim::layer_norm_hidden_sharded<double>(
      world, x_dist, nullptr, nullptr, params, HiddenStats::welford, "seq", faults, "y", saved);
  CHECK(good.local(0)[0] == -1.0);
  CHECK(good.local(1)[1] == 1.0);
  faults.hidden_shard_local_stats = true;
  const auto bad = shardsim::layer_norm_hidden_sharded<double>(
      world, x_dist, nullptr, nullptr, params, HiddenStats::welford, "seq", faults, "y", saved);
  CHECK(saved.stats.mean.local(0)[0] == 0.0);
  CHECK(saved.stats.mean.local(1)[0] == 4.0);
  CHECK(std::isnan(bad.local(0)[0]));
}

TEST_CASE("the hidden-sharded plans record the documented boundary names, in order",
          "[layer_norm][hidden]") {
  // The report prints these names and the step stores the oracle under them: each plan builds
  // them with part_name / moved_name from layer_norm_parts. Entries are "tensor <- dense".
  const Shape shape({{"seq", 3}, {"hidden", 4}});
  const auto x = seeded<double>(shape, tensor_test::normal(0.5, 2.0), 61);
  const auto w = seeded<double>(Shape({{"hidden", 4}}), tensor_test::uniform(0.5, 1.5), 62);
  const auto b = seeded<double>(Shape({{"hidden", 4}}), tensor_test::uniform(-0.25, 0.25), 63);
  const auto dy = seeded<double>(shape, tensor_test::normal(0.0, 1.0), 64);
  shardsim::World<double> world(2, shardsim::ReduceOrder::rank, {});
  std::vector<std::string> seen;
  world.set_hook([&](const shardsim::BoundaryLabel& label, const DistTensor<double>&) {
    seen.push_back(label.tensor + " <- " + label.dense_name());
    return true;
  });
  const Placement placement = Placement::shard("hidden");
  const auto x_dist = shardsim::distribute("x", x, placement, 2);
  const auto w_dist = shardsim::distribute("w", w, placement, 2);
  const auto b_dist = shardsim::distribute("b", b, placement, 2);
  const auto dy_dist = shardsim::distribute("grad(y)", dy, placement, 2);
  auto names = [&](HiddenStats mode) {
    seen.clear();
    shardsim::LayerNormHiddenSaved<double> saved;
    shardsim::layer_norm_hidden_sharded(world, x_dist, &w_dist, &b_dist, LayerNormParams{}, mode,
                                        "seq", {}, "y", saved);
    shardsim::layer_norm_hidden_sharded_backward(world, dy_dist, x_dist, &w_dist, &b_dist,
                                                 LayerNormParams{}, mode, "seq", {}, saved,
                                                 "grad(x)", "grad(w)", "grad(b)", "grad(x)@y");
    return seen;
  };
  using Names = std::vector<std::string>;
  CHECK(names(HiddenStats::sum_sumsq) == Names{"y.sum <- y.sum", "y.sumsq <- y.sumsq",
                                               "y.mean <- y.mean", "y.rstd <- y.rstd", "y <- y",
                                               "grad(y).sum_dnorm <- grad(y).sum_dnorm",
                                               "grad(y).sum_dnorm_norm <- grad(y).sum_dnorm_norm"});
  CHECK(names(HiddenStats::welford) == Names{"y.moments <- y.moments", "y.mean <- y.mean",
                                             "y.rstd <- y.rstd", "y <- y",
                                             "grad(y).sum_dnorm <- grad(y).sum_dnorm",
                                             "grad(y).sum_dnorm_norm <- grad(y).sum_dnorm_norm"});
  CHECK(names(HiddenStats::redistribute) ==
        Names{"x@seq <- x", "w@gathered <- w", "b@gathered <- b", "y@seq.mean <- y.mean",
              "y@seq.rstd <- y.rstd", "y@seq <- y", "y <- y", "grad(y)@seq <- grad(y)",
              "grad(x)@y <- grad(x)@y"});
}

namespace {

// A hidden-sharded layer_norm scenario with the step's extra lines spliced in.
std::string hidden_scenario(const std::string& step_lines, const std::string& bias_placement) {
  return "[mesh]\nranks = 2\n\n"
         "[[tensors]]\nname = \"x\"\naxes = [\"seq\", \"hidden\"]\nshape = [3, 4]\n"
         "placement = \"Shard(hidden)\"\n\n"
         "[[tensors]]\nname = \"b\"\nrole = \"parameter\"\naxes = [\"hidden\"]\nshape = [4]\n"
         "placement = \"" +
         bias_placement +
         "\"\n\n"
         "[[steps]]\nop = \"layer_norm\"\ninput = \"x\"\nbias = \"b\"\noutput = \"y\"\n" +
         step_lines;
}

}  // namespace

TEST_CASE("the loader requires stats for a hidden-sharded layer_norm and Shard(hidden) params",
          "[layer_norm][hidden][scenario]") {
  using Catch::Matchers::Contains;
  // Accepted: stats chosen, bias sharded like the features.
  CHECK_NOTHROW(shardsim::parse_scenario(hidden_scenario("stats = \"welford\"\n", "Shard(hidden)"),
                                         "ok.toml"));
  // No stats: located at the step's input key (line 19, column 9), naming the choices.
  CHECK_THROWS_WITH(shardsim::parse_scenario(hidden_scenario("", "Shard(hidden)"), "s.toml"),
                    Contains("s.toml:19:9: steps[0].input:") && Contains("stats = \"sum_sumsq\""));
  // A bias held Replicate next to a Shard(hidden) input: named with both placements.
  CHECK_THROWS_WITH(
      shardsim::parse_scenario(hidden_scenario("stats = \"sum_sumsq\"\n", "Replicate"), "s.toml"),
      Contains("steps[0].bias:") && Contains("must be Shard(hidden)") && Contains("not Replicate"));
  // An unknown mode lists the known ones.
  CHECK_THROWS_WITH(
      shardsim::parse_scenario(hidden_scenario("stats = \"chan\"\n", "Shard(hidden)"), "s.toml"),
      Contains("steps[0].stats:") && Contains("sum_sumsq, welford, redistribute"));
  // redistribute needs a token axis that exists.
  CHECK_THROWS_WITH(
      shardsim::parse_scenario(
          hidden_scenario("stats = \"redistribute\"\ntoken_axis = \"batch\"\n", "Shard(hidden)"),
          "s.toml"),
      Contains("steps[0].token_axis:") && Contains("'batch' is not one of [seq=3, hidden=4]"));
}
