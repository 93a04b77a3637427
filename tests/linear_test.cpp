// Tests for ops/linear.hpp and ops/linear_plan.hpp: a hand-derived known answer (forward and
// backward), named-axis layouts, a finite-difference gradient check in mp, the three sharded
// forms against the dense oracle for N = 1..5 and splits that do not divide, and the loader's
// located errors.
#include "ops/linear/linear.hpp"

#include <catch2/catch.hpp>
#include <string>

#include "compare/compare.hpp"
#include "core/error.hpp"
#include "ops/linear/linear_plan.hpp"
#include "scenario/scenario.hpp"
#include "scenario_test_support.hpp"
#include "tensor_test_support.hpp"

using shardsim::DistTensor;
using shardsim::LinearParams;
using shardsim::Mp;
using shardsim::Placement;
using shardsim::ReduceOrder;
using shardsim::Schedule;
using shardsim::Shape;
using shardsim::Tensor;
using shardsim::World;
using tensor_test::assemble;
using tensor_test::bitwise_equal;
using tensor_test::make;

namespace {

using scenario_test::load_error;

LinearParams up() { return {"hidden", "ffn"}; }

}  // namespace

// Known answer. x (seq=2, hidden=3) = [[1, 2, 3], [4, 5, 6]], W (ffn=2, hidden=3) =
// [[1, 0, -1], [0.5, 0.25, 2]], b = [10, -1]:
//   y[0] = [1 - 3 + 10, 0.5 + 0.5 + 6 - 1] = [8, 6]
//   y[1] = [4 - 6 + 10, 2 + 1.25 + 12 - 1] = [8, 14.25]
// With dy = [[1, 2], [3, -1]]:
//   dx[r, i] = sum_k dy[r, k] W[k, i]:  dx[0] = [1 + 1, 0 + 0.5, -1 + 4] = [2, 0.5, 3]
//                                       dx[1] = [3 - 0.5, 0 - 0.25, -3 - 2] = [2.5, -0.25, -5]
//   dW[k, i] = sum_r dy[r, k] x[r, i]:  dW[0] = [1 + 12, 2 + 15, 3 + 18] = [13, 17, 21]
//                                       dW[1] = [2 - 4, 4 - 5, 6 - 6] = [-2, -1, 0]
//   db = [1 + 3, 2 - 1] = [4, 1]
// Every intermediate is a small dyadic rational, exact in every precision, so the results are
// exact.
TEMPLATE_TEST_CASE("linear known answer, forward and backward", "[linear]", float, double, Mp) {
  shardsim::set_mp_precision(256);
  const auto x = make<TestType>(Shape({{"seq", 2}, {"hidden", 3}}), {1, 2, 3, 4, 5, 6});
  const auto w = make<TestType>(Shape({{"ffn", 2}, {"hidden", 3}}), {1, 0, -1, 0.5, 0.25, 2});
  const auto b = make<TestType>(Shape({{"ffn", 2}}), {10, -1});
  Tensor<TestType> y;
  shardsim::linear_forward(x, w, &b, up(), y);
  CHECK(y.shape() == Shape({{"seq", 2}, {"ffn", 2}}));
  CHECK(bitwise_equal(y, make<TestType>(y.shape(), {8, 6, 8, 14.25})));

  const auto dy = make<TestType>(y.shape(), {1, 2, 3, -1});
  Tensor<TestType> dx;
  Tensor<TestType> dw(w.shape());
  Tensor<TestType> db(b.shape());
  shardsim::linear_backward(dy, x, w, up(), dx, &dw, &db);
  CHECK(bitwise_equal(dx, make<TestType>(x.shape(), {2, 0.5, 3, 2.5, -0.25, -5})));
  CHECK(bitwise_equal(dw, make<TestType>(w.shape(), {13, 17, 21, -2, -1, 0})));
  CHECK(bitwise_equal(db, make<TestType>(b.shape(), {4, 1})));
  // Parameter grads accumulate (+=), activation grads are written (=).
  shardsim::linear_backward(dy, x, w, up(), dx, &dw, &db);
  CHECK(bitwise_equal(dx, make<TestType>(x.shape(), {2, 0.5, 3, 2.5, -0.25, -5})));
  CHECK(bitwise_equal(dw, make<TestType>(w.shape(), {26, 34, 42, -4, -2, 0})));
  CHECK(bitwise_equal(db, make<TestType>(b.shape(), {8, 2})));
}

TEST_CASE("linear finds its axes by name, wherever they sit", "[linear]") {
  // The same numbers as the known answer with x stored transposed, (hidden=3, seq=2), and W
  // stored (hidden=3, ffn=2): the output keeps x's layout, (ffn=2, seq=2), and holds y^T.
  const auto xt = make<double>(Shape({{"hidden", 3}, {"seq", 2}}), {1, 4, 2, 5, 3, 6});
  const auto wt = make<double>(Shape({{"hidden", 3}, {"ffn", 2}}), {1, 0.5, 0, 0.25, -1, 2});
  const auto b = make<double>(Shape({{"ffn", 2}}), {10, -1});
  Tensor<double> y;
  shardsim::linear_forward(xt, wt, &b, up(), y);
  CHECK(y.shape() == Shape({{"ffn", 2}, {"seq", 2}}));
  CHECK(bitwise_equal(y, make<double>(y.shape(), {8, 8, 6, 14.25})));
  Tensor<double> dx;
  Tensor<double> dw(wt.shape());
  shardsim::linear_backward<double>(make<double>(y.shape(), {1, 3, 2, -1}), xt, wt, up(), dx, &dw,
                                    nullptr);
  CHECK(bitwise_equal(dx, make<double>(xt.shape(), {2, 2.5, 0.5, -0.25, 3, -5})));
  CHECK(bitwise_equal(dw, make<double>(wt.shape(), {13, -2, 17, -1, 21, 0})));
}

// Finite differences at 256 bits. L = sum(y * g) is linear in each of x, W, b, so the central
// difference (L(v + h) - L(v - h)) / 2h has no truncation error; only rounding remains, about
// |L| 2^-256 / h = 2^-216 |L| for h = 2^-40. 2^-200 relative leaves a wide margin.
TEST_CASE("linear backward matches finite differences in mp", "[linear][mp]") {
  shardsim::set_mp_precision(256);
  const Shape xs({{"batch", 2}, {"seq", 3}, {"hidden", 4}});
  auto x = tensor_test::seeded<Mp>(xs, -1, 1, 11);
  auto w = tensor_test::seeded<Mp>(Shape({{"ffn", 5}, {"hidden", 4}}), -1, 1, 12);
  auto b = tensor_test::seeded<Mp>(Shape({{"ffn", 5}}), -1, 1, 13);
  const auto g = tensor_test::seeded<Mp>(Shape({{"batch", 2}, {"seq", 3}, {"ffn", 5}}), -1, 1, 14);
  auto loss = [&] {
    Tensor<Mp> y;
    shardsim::linear_forward(x, w, &b, up(), y);
    Mp sum = 0;
    for (std::int64_t e = 0; e < y.numel(); ++e) sum += y[e] * g[e];
    return sum;
  };
  Tensor<Mp> dx;
  Tensor<Mp> dw(w.shape());
  Tensor<Mp> db(b.shape());
  shardsim::linear_backward(g, x, w, up(), dx, &dw, &db);
  const Mp h = ldexp(Mp(1), -40);
  const Mp tol = ldexp(Mp(1), -200);
  for (auto [tensor, grad] : {std::pair{&x, &dx}, {&w, &dw}, {&b, &db}}) {
    for (std::int64_t e = 0; e < tensor->numel(); ++e) {
      const Mp saved = (*tensor)[e];
      (*tensor)[e] = saved + h;
      const Mp plus = loss();
      (*tensor)[e] = saved - h;
      const Mp minus = loss();
      (*tensor)[e] = saved;
      const Mp numeric = (plus - minus) / (2 * h);
      INFO("element " << e);
      CHECK(abs(numeric - (*grad)[e]) <= tol * (1 + abs(numeric)));
    }
  }
}

namespace {

// Runs one form of the sharded plan forward and backward and compares with the oracle.
// x: [batch=2, seq, hidden=5] -> y: [batch=2, seq, ffn]; W (ffn, hidden).
template <typename T>
void check_form(int ranks, std::int64_t seq, std::int64_t ffn, const Placement& x_place,
                const Placement& w_place, const LinearParams& params, bool transpose) {
  const Shape xs({{"batch", 2}, {"seq", seq}, {"hidden", 5}});
  const Tensor<T> x = tensor_test::seeded<T>(xs, -1, 1, 21);
  Tensor<T> w = tensor_test::seeded<T>(Shape({{"ffn", ffn}, {"hidden", 5}}), -1, 1, 22);
  LinearParams p = params;
  if (transpose) {  // row-parallel: the layer contracts ffn and produces hidden
    w = tensor_test::seeded<T>(Shape({{"hidden", 5}, {"ffn", ffn}}), -1, 1, 23);
    p = {"ffn", "hidden"};
  }
  const Tensor<T> input =
      transpose
          ? tensor_test::seeded<T>(Shape({{"batch", 2}, {"seq", seq}, {"ffn", ffn}}), -1, 1, 24)
          : x;
  const std::string out = p.out_axis;
  const Tensor<T> b = tensor_test::seeded<T>(Shape({{out, w.shape().extent(out)}}), -1, 1, 25);
  Tensor<T> y;
  shardsim::linear_forward(input, w, &b, p, y);
  const Tensor<T> dy = tensor_test::seeded<T>(y.shape(), -1, 1, 26);
  Tensor<T> dx;
  Tensor<T> dw(w.shape());
  Tensor<T> db(b.shape());
  shardsim::linear_backward(dy, input, w, p, dx, &dw, &db);

  const World<T> world(ranks, ReduceOrder::rank, Schedule{});
  const auto form = shardsim::linear_parallel_of(w_place, p);
  const Placement b_place =
      form == shardsim::LinearParallel::column ? w_place : Placement::replicate();
  const DistTensor<T> sx = shardsim::distribute("x", input, x_place, ranks);
  const DistTensor<T> sw = shardsim::distribute("w", w, w_place, ranks);
  const DistTensor<T> sb = shardsim::distribute("b", b, b_place, ranks);
  const DistTensor<T> sy = shardsim::linear_sharded(world, sx, sw, &sb, p, "y");
  Placement y_place = sy.layout.on(0);
  // Reordered sums: a sum of n terms of magnitude <= 1 computed in two orders differs by at
  // most 2 (n - 1) u sum|t| <= 2 n^2 u; here n <= 14 (2 * 7 rows for dW), so <= 392 u absolute,
  // and the normwise denominator (the largest |value| of the seeded tensor) is above 1/2 for
  // these sizes. 1024 u is a bound with room, far below any semantic error.
  const double reordered = 1024 * tensor_test::unit_roundoff<T>();
  if (form == shardsim::LinearParallel::row) {
    CHECK(sy.layout.on(0).is_partial());
    CHECK(tensor_test::normwise_relative_error(assemble(sy), y) <= reordered);
  } else {
    CHECK(bitwise_equal(assemble(sy), y));  // the dense arithmetic, per output feature
  }
  // The gradient arrives where the forward output lives (Replicate for a Partial output).
  const DistTensor<T> sdy = shardsim::distribute(
      "grad(y)", dy, y_place.is_partial() ? Placement::replicate() : y_place, ranks);
  auto grads = shardsim::linear_backward_sharded(world, sdy, sx, sw, &sb, p, "grad(x)", "grad(w)",
                                                 "grad(b)");
  if (form != shardsim::LinearParallel::none) CHECK(grads.dweight.layout.on(0) == w_place);
  auto check = [&](const DistTensor<T>& got, const Tensor<T>& want, bool exact) {
    INFO(got.name << " " << got.layout.on(0).str());
    CHECK(exact == !got.layout.on(0).is_partial());
    if (exact) {
      CHECK(bitwise_equal(assemble(got), want));
    } else {
      CHECK(tensor_test::normwise_relative_error(assemble(got), want) <= reordered);
    }
  };
  check(grads.dx, dx, grads.dx_exact);
  check(grads.dweight, dw, grads.dweight_exact);
  check(grads.dbias, db, grads.dbias_exact);
}

}  // namespace

TEMPLATE_TEST_CASE("sharded linear equals the dense oracle in all three forms", "[linear]", float,
                   double, Mp) {
  shardsim::set_mp_precision(256);
  for (int ranks = 1; ranks <= 5; ++ranks) {
    for (std::int64_t ffn : {1, 6, 7}) {
      for (const Placement& w_place : tensor_test::shards_of("ffn")) {
        INFO("ranks " << ranks << ", ffn " << ffn << ", W " << w_place.str());
        // Column-parallel: x Replicate, W Shard(ffn) (out features).
        check_form<TestType>(ranks, 3, ffn, Placement::replicate(), w_place, up(), false);
        // Row-parallel: x and W Shard(ffn) (in features), output Partial.
        check_form<TestType>(ranks, 3, ffn, w_place, w_place, up(), true);
      }
      // No tensor parallelism: W Replicate, x whole rows (Replicate or sequence shards).
      for (const Placement& x_place : tensor_test::shards_of("seq")) {
        INFO("ranks " << ranks << ", ffn " << ffn << ", x " << x_place.str());
        check_form<TestType>(ranks, 7, ffn, x_place, Placement::replicate(), up(), false);
      }
      check_form<TestType>(ranks, 7, ffn, Placement::replicate(), Placement::replicate(), up(),
                           false);
    }
  }
}

namespace {

// A column-parallel scenario whose input placement and layer options vary.
std::string scenario_text(const std::string& x_placement, const std::string& weight_axes,
                          const std::string& extra) {
  return "[mesh]\nranks = 2\n"
         "[[tensors]]\nname = \"x\"\naxes = [\"seq\", \"hidden\"]\nshape = [4, 3]\n"
         "placement = \"" +
         x_placement +
         "\"\n"
         "[[tensors]]\nname = \"w\"\naxes = " +
         weight_axes +
         "\nshape = [6, 3]\n"
         "placement = \"Shard(ffn)\"\n"
         "[[steps]]\nop = \"linear\"\ninput = \"x\"\nweight = \"w\"\noutput = \"y\"\n" +
         extra;
}

}  // namespace

TEST_CASE("the loader places linear outputs and rejects misplaced inputs with a location",
          "[linear][scenario]") {
  const auto ok = shardsim::parse_scenario(
      scenario_text("Replicate", "[\"ffn\", \"hidden\"]", "parallel = \"column\"\n"), "lin.toml");
  const shardsim::RunReport run = shardsim::evaluate(ok, shardsim::parse_precision("f64"));
  CHECK(run.pass);
  const shardsim::TraceEntry& y = run.boundaries.back().entry;
  CHECK(y.tensor == "y");
  CHECK(y.global == Shape({{"seq", 4}, {"ffn", 6}}));
  CHECK(y.layout.on(0) == Placement::shard("ffn"));
  CHECK(y.ranks[1].local_shape == Shape({{"seq", 4}, {"ffn", 3}}));

  // A sequence-sharded input reaching a column-parallel layer (the missing all-gather).
  const std::string sharded = load_error(scenario_text("Shard(seq)", "[\"ffn\", \"hidden\"]", ""));
  CHECK(sharded.find("s.toml:") == 0);
  CHECK(sharded.find("steps[0].input") != std::string::npos);
  CHECK(sharded.find("column-parallel") != std::string::npos);
  CHECK(sharded.find("Replicate") != std::string::npos);

  // The weight is (out, in): [hidden, ffn] contracts ffn, which x does not have.
  const std::string reversed = load_error(scenario_text("Replicate", "[\"hidden\", \"ffn\"]", ""));
  CHECK(reversed.find("steps[0].weight") != std::string::npos);
  CHECK(reversed.find("(out, in)") != std::string::npos);

  // A declared form that the placements contradict.
  const std::string declared =
      load_error(scenario_text("Replicate", "[\"ffn\", \"hidden\"]", "parallel = \"row\"\n"));
  CHECK(declared.find("steps[0].parallel") != std::string::npos);
  CHECK(declared.find("column-parallel") != std::string::npos);
}
