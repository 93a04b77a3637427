// Tests for ops/swiglu/ (the op added as the "an op in one folder" exercise, docs/architecture.md):
// exact values at g = 0, both forms of the derivative against a 256-bit reference and against
// finite differences, the elementwise sharded plan equal to the dense oracle bit for bit under
// every placement, and a Llama-style SwiGLU MLP trained under tensor parallelism against its
// dense oracle, with a shape error located.
#include "ops/swiglu/swiglu.hpp"

#include <catch2/catch.hpp>
#include <string>
#include <type_traits>

#include "compare/compare.hpp"
#include "ops/add/add_plan.hpp"
#include "ops/swiglu/swiglu_plan.hpp"
#include "scenario/scenario.hpp"
#include "scenario_test_support.hpp"
#include "tensor_test_support.hpp"

using shardsim::Mp;
using shardsim::Placement;
using shardsim::Shape;
using shardsim::Tensor;
using tensor_test::assemble;
using tensor_test::bitwise_equal;
using tensor_test::make;

namespace {

// The definition, evaluated directly at the current mp precision with MPFR's correctly rounded
// exp: silu(g) u = g u / (1 + e^-g).
Mp reference_swiglu(const Mp& g, const Mp& u) { return g * u / (1 + exp(-g)); }

template <typename T>
T rounded(const Mp& v) {
  if constexpr (std::is_same_v<T, float>) {
    return shardsim::round_to_f32(v);
  } else {
    return shardsim::round_to_f64(v);
  }
}

}  // namespace

TEMPLATE_TEST_CASE("swiglu at g = 0: y = 0, dg = dy u / 2, du = 0, exactly", "[swiglu]", float,
                   double, Mp) {
  shardsim::set_mp_precision(256);
  // exp(-0) = 1, so s = 1 / 2 and silu(0) = 0 / 2 = 0, exactly in every type; the slope is
  // s (1 + 0 (1 - s)) = 1/2. With u = 3, dy = 2: y = 0, dg = (2 * 3) * 0.5 = 3, du = 2 * 0 = 0.
  const Shape one({{"ffn", 1}});
  const auto g = make<TestType>(one, {0});
  const auto u = make<TestType>(one, {3});
  Tensor<TestType> y, dg, du;
  shardsim::swiglu_forward(g, u, y);
  shardsim::swiglu_backward(make<TestType>(one, {2}), g, u, dg, du);
  CHECK(y[0] == TestType(0));
  CHECK(dg[0] == TestType(3));
  CHECK(du[0] == TestType(0));
}

TEMPLATE_TEST_CASE("swiglu forward agrees with a 256-bit reference", "[swiglu]", float, double) {
  shardsim::set_mp_precision(256);
  // Each value takes exp (glibc: <= 1 ulp), 1 + e, the division and the product by u: about 5
  // roundings of relative size u_T, none amplified (1 + e^-g > 1 never cancels): under 8 ulps.
  const std::vector<double> gs{-4, -1, -0.5, 0.25, 1, 3, 8};
  const std::vector<double> us{0.5, -2, 1.25, 3, -0.75, 1, 0.125};
  const Shape shape({{"ffn", 7}});
  Tensor<TestType> y;
  shardsim::swiglu_forward(make<TestType>(shape, gs), make<TestType>(shape, us), y);
  for (std::size_t i = 0; i < gs.size(); ++i) {
    INFO("g = " << gs[i] << ", u = " << us[i]);
    const TestType want = rounded<TestType>(reference_swiglu(Mp(gs[i]), Mp(us[i])));
    CHECK(shardsim::ulp_distance(y[static_cast<std::int64_t>(i)], want) <= 8);
  }
}

// Central differences at 256 bits with h = 2^-70, in each argument: the truncation error is
// h^2 |f'''| / 6 (|f'''| < 4 here) ~ 2^-140, the rounding error |f| 2^-256 / h ~ 2^-183. 2^-130
// bounds both. du = silu(g) exactly, dg = u silu'(g): two independent checks of the formulas.
TEST_CASE("swiglu backward matches finite differences in mp", "[swiglu][mp]") {
  shardsim::set_mp_precision(256);
  const std::vector<double> gs{-3, -1, -0.5, 0, 0.3, 1, 2.5};
  const std::vector<double> us{1, -2, 0.5, 1.5, -1, 3, 0.25};
  const Shape shape({{"ffn", 7}});
  const auto g = make<Mp>(shape, gs);
  const auto u = make<Mp>(shape, us);
  Tensor<Mp> dg, du;
  shardsim::swiglu_backward(make<Mp>(shape, std::vector<double>(7, 1.0)), g, u, dg, du);
  const Mp h = ldexp(Mp(1), -70);
  const Shape one({{"ffn", 1}});
  auto f = [&](const Mp& gv, const Mp& uv) {
    Tensor<Mp> a(one), b(one), y;
    a[0] = gv;
    b[0] = uv;
    shardsim::swiglu_forward(a, b, y);
    return y[0];
  };
  for (std::size_t i = 0; i < gs.size(); ++i) {
    INFO("g = " << gs[i] << ", u = " << us[i]);
    const Mp gi(gs[i]), ui(us[i]);
    const auto e = static_cast<std::int64_t>(i);
    CHECK(abs((f(gi + h, ui) - f(gi - h, ui)) / (2 * h) - dg[e]) <= ldexp(Mp(1), -130));
    CHECK(abs((f(gi, ui + h) - f(gi, ui - h)) / (2 * h) - du[e]) <= ldexp(Mp(1), -130));
  }
}

TEMPLATE_TEST_CASE("sharded swiglu equals the dense oracle bitwise under every placement",
                   "[swiglu]", float, double, Mp) {
  shardsim::set_mp_precision(256);
  const Shape shape({{"batch", 2}, {"seq", 7}, {"ffn", 5}});
  const Tensor<TestType> g = tensor_test::seeded<TestType>(shape, -4, 4, 41);
  const Tensor<TestType> u = tensor_test::seeded<TestType>(shape, -2, 2, 42);
  const Tensor<TestType> dy = tensor_test::seeded<TestType>(shape, -1, 1, 43);
  Tensor<TestType> y, dg, du;
  shardsim::swiglu_forward(g, u, y);
  shardsim::swiglu_backward(dy, g, u, dg, du);
  std::vector<Placement> placements = tensor_test::shards_of("seq");
  for (const Placement& p : tensor_test::shards_of("ffn")) placements.push_back(p);
  placements.push_back(Placement::replicate());
  for (int ranks = 1; ranks <= 5; ++ranks) {
    const shardsim::World<TestType> world(ranks, shardsim::ReduceOrder::rank, shardsim::Schedule{});
    for (const Placement& p : placements) {
      INFO(ranks << " ranks, " << p.str());
      const auto sg = shardsim::distribute("g", g, p, ranks);
      const auto su = shardsim::distribute("u", u, p, ranks);
      CHECK(bitwise_equal(assemble(shardsim::swiglu_sharded(world, sg, su, "y")), y));
      const auto sdy = shardsim::distribute("grad(y)", dy, p, ranks);
      shardsim::DistTensor<TestType> sdg, sdu;
      shardsim::swiglu_backward_sharded(world, sdy, sg, su, "grad(g)", "grad(u)", sdg, sdu);
      CHECK(bitwise_equal(assemble(sdg), dg));
      CHECK(bitwise_equal(assemble(sdu), du));
    }
  }
}

namespace {

// A Llama-style MLP on 2 tensor-parallel ranks: gate and up column-parallel (Shard(ffn)), SwiGLU
// on the ffn shards, down row-parallel (Partial), all-reduced, then an MSE loss; 2 SGD steps.
// `up_shape` is the up weight's shape (a shape error when it differs from the gate's).
std::string swiglu_mlp(const std::string& up_shape = "[12, 8]") {
  return R"toml(
name = "swiglu_mlp"
seed = 7
precisions = ["f64"]
train_steps = 2
learning_rate = 0.1
[mesh]
ranks = 2
[[tensors]]
name = "x"
axes = ["batch", "seq", "hidden"]
shape = [2, 5, 8]
init = { dist = "normal", mean = 0.0, std = 1.0 }
placement = "Replicate"
[[tensors]]
name = "target"
role = "target"
axes = ["batch", "seq", "hidden"]
shape = [2, 5, 8]
init = { dist = "uniform", low = -1.0, high = 1.0 }
placement = "Replicate"
[[tensors]]
name = "w_gate"
role = "parameter"
axes = ["ffn", "hidden"]
shape = [12, 8]
init = { dist = "uniform", low = -0.5, high = 0.5 }
placement = "Shard(ffn)"
[[tensors]]
name = "w_up"
role = "parameter"
axes = ["ffn", "hidden"]
shape = )toml" +
         up_shape + R"toml(
init = { dist = "uniform", low = -0.5, high = 0.5 }
placement = "Shard(ffn)"
[[tensors]]
name = "w_down"
role = "parameter"
axes = ["hidden", "ffn"]
shape = [8, 12]
init = { dist = "uniform", low = -0.3, high = 0.3 }
placement = "Shard(ffn)"
[[steps]]
op = "linear"
input = "x"
weight = "w_gate"
output = "gate"
[[steps]]
op = "linear"
input = "x"
weight = "w_up"
output = "up"
[[steps]]
op = "swiglu"
input = "gate"
up = "up"
output = "act"
[[steps]]
op = "linear"
input = "act"
weight = "w_down"
output = "o"
[[steps]]
op = "redistribute"
input = "o"
output = "o.full"
to = "Replicate"
[[steps]]
op = "mse_loss"
input = "o.full"
target = "target"
output = "loss"
)toml";
}

}  // namespace

TEST_CASE("a tensor-parallel SwiGLU MLP trains for 2 steps against its dense oracle", "[swiglu]") {
  const shardsim::Scenario s = shardsim::parse_scenario(swiglu_mlp(), "swiglu_mlp.toml");
  const shardsim::RunReport run = shardsim::evaluate(s, s.precisions.front());
  CHECK(run.pass);
  // Elementwise on the ffn shards, so a swiglu boundary claims exactness when its inputs are
  // bitwise the dense ones (the boundary contract drops the claim otherwise). The step-1 forward
  // reads gate and up from column-parallel linears, exact, so it is bit for bit; everything after
  // the row-parallel down projection (a reordered sum, Partial) is only within tolerance, and so
  // are the backward and step 2: none may fail.
  int boundaries = 0;
  for (const shardsim::BoundaryResult& b : run.boundaries) {
    if (b.entry.op != "swiglu" && b.entry.op != "swiglu_backward") continue;
    INFO(b.entry.op << " " << b.entry.tensor << " step " << b.entry.step);
    CHECK(b.entry.layout.on(0) == Placement::shard("ffn"));
    CHECK(b.status != shardsim::Status::fail);
    if (b.entry.step == 1 && b.entry.op == "swiglu") CHECK(b.status == shardsim::Status::exact);
    ++boundaries;
  }
  CHECK(boundaries == 2 * 3);  // per step: act, grad(gate), grad(up)
}

TEST_CASE("swiglu refuses an up projection of another shape, at its location", "[swiglu]") {
  // w_up [10, 8] makes up [batch=2, seq=5, ffn=10] against the gate's ffn=12.
  const std::string error = scenario_test::load_error(swiglu_mlp("[10, 8]"), "s.toml");
  CHECK_THAT(error, Catch::Contains("steps[2]"));
  CHECK_THAT(error, Catch::Contains("shape mismatch: 'up' is"));
  CHECK_THAT(error, Catch::Contains("but 'gate' is"));
}
