// Tests for AdamW (ops/adamw.hpp, docs/training.md "AdamW"): the update on hand-derived values,
// each fault's rule, the moments kept from one training step to the next, and the loader's
// located errors for `optimizer`. torch.optim.AdamW itself is the reference of
// tests/python/test_adamw.py; the fault scenarios and their clean twins are judged by the replay
// of scenarios/ ([expect]).
#include "ops/adamw.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <string>

#include "scenario/scenario.hpp"
#include "scenario_test_support.hpp"

using shardsim::AdamWFault;
using shardsim::AdamWHyper;
using shardsim::Shape;
using shardsim::Tensor;
using scenario_test::load_error;

namespace {

struct One {
  Tensor<double> p, g, m, v;
};

// One element: p = 1, g = 2, zero moments.
One one_element() {
  const Shape s({{"x", 1}});
  One o{Tensor<double>(s), Tensor<double>(s), Tensor<double>(s), Tensor<double>(s)};
  o.p[0] = 1.0;
  o.g[0] = 2.0;
  return o;
}

// Hyperparameters whose scalars are exact in binary: 1 - beta1 = 0.5, 1 - beta2 = 0.25,
// bc1 = 0.5 and bc2 = 0.25 at t = 1 (sqrt(bc2) = 0.5), 1 - lr * wd = 0.75.
constexpr AdamWHyper kExact{.lr = 0.5, .beta1 = 0.5, .beta2 = 0.75, .eps = 0.25,
                            .weight_decay = 0.5};

}  // namespace

TEST_CASE("adamw: the first two updates follow PyTorch's formula, derived by hand", "[adamw]") {
  One o = one_element();
  // t = 1: p <- 1 * 0.75; m = 0.5 * 2 = 1; v = 0.25 * 2 * 2 = 1;
  // denom = sqrt(1) / sqrt(0.25) + 0.25 = 2.25; step size lr / bc1 = 1; p = 0.75 - 1 / 2.25.
  shardsim::adamw_step(o.p, o.g, o.m, o.v, kExact, 1);
  CHECK(o.m[0] == 1.0);
  CHECK(o.v[0] == 1.0);
  CHECK(o.p[0] == 0.75 - 1.0 / 2.25);
  // t = 2 with g = 2 again: m = 0.5 * 1 + 0.5 * 2 = 1.5; v = 0.75 * 1 + 0.25 * 4 = 1.75;
  // bc1 = 1 - 0.25 = 0.75, bc2 = 1 - 0.5625 = 0.4375; p <- p * 0.75 - (0.5 / 0.75) * 1.5 /
  // (sqrt(1.75) / sqrt(0.4375) + 0.25), and sqrt(1.75) / sqrt(0.4375) = sqrt(4) = 2 up to the
  // two square roots' rounding.
  const double p1 = o.p[0];
  shardsim::adamw_step(o.p, o.g, o.m, o.v, kExact, 2);
  CHECK(o.m[0] == 1.5);
  CHECK(o.v[0] == 1.75);
  CHECK(o.p[0] == Approx(p1 * 0.75 - (0.5 / 0.75) * 1.5 / 2.25).epsilon(1e-15));
}

TEST_CASE("adamw: at t = 1 the step is lr * sign(g) whatever the betas", "[adamw]") {
  // m_hat = g and v_hat = g^2 at t = 1, so p moves by lr * g / (|g| + eps): with eps tiny
  // against |g|, lr in the direction of -g, for every element, whatever its magnitude.
  const Shape s({{"x", 4}});
  Tensor<double> p(s), g(s), m(s), v(s);
  const double grads[] = {3.0, -1e-3, 250.0, -0.5};
  for (int i = 0; i < 4; ++i) {
    p[i] = 1.0;
    g[i] = grads[i];
  }
  const AdamWHyper h{.lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-12,
                     .weight_decay = 0.0};
  shardsim::adamw_step(p, g, m, v, h, 1);
  for (int i = 0; i < 4; ++i) {
    CHECK(p[i] == Approx(1.0 - 0.01 * (grads[i] > 0 ? 1 : -1)).epsilon(1e-8));
  }
}

TEST_CASE("adamw: the faults' rules, derived by hand", "[adamw][faults]") {
  SECTION("bias correction missing: bc1 = bc2 = 1") {
    // denom = sqrt(1) + 0.25 = 1.25, step size lr = 0.5: p = 0.75 - 0.5 * 1 / 1.25 = 0.35.
    One o = one_element();
    shardsim::adamw_step(o.p, o.g, o.m, o.v, kExact, 1, AdamWFault::bias_correction_missing);
    CHECK(o.m[0] == 1.0);  // the moments are the correct ones
    CHECK(o.p[0] == Approx(0.35).epsilon(1e-15));
  }
  SECTION("decay coupled: g + wd * p enters the moments, no decoupled decay") {
    // g' = 2 + 0.5 * 1 = 2.5; m = 1.25; v = 0.25 * 6.25 = 1.5625, sqrt / 0.5 = 2.5;
    // denom = 2.75; p = 1 - 1 * 1.25 / 2.75.
    One o = one_element();
    shardsim::adamw_step(o.p, o.g, o.m, o.v, kExact, 1, AdamWFault::decay_coupled);
    CHECK(o.m[0] == 1.25);
    CHECK(o.v[0] == 1.5625);
    CHECK(o.p[0] == 1.0 - 1.25 / 2.75);
  }
}

namespace {

const std::string kHead = R"toml(
name = "o"
precisions = ["f64"]
train_steps = 2
[mesh]
dims = { dp = 2 }
[[tensors]]
name = "x"
axes = ["batch", "seq", "hidden"]
shape = [2, 3, 4]
init = { dist = "normal", mean = 0.0, std = 1.0 }
placement = "Shard(batch)"
[[tensors]]
name = "t"
role = "target"
axes = ["batch", "seq", "hidden"]
shape = [2, 3, 4]
init = { dist = "normal", mean = 0.0, std = 1.0 }
placement = "Shard(batch)"
[[tensors]]
name = "w"
role = "parameter"
axes = ["hidden"]
shape = [4]
init = { dist = "uniform", low = 0.5, high = 1.5 }
placement = "Replicate"
[[steps]]
op = "rms_norm"
input = "x"
weight = "w"
output = "y"
[[steps]]
op = "mse_loss"
input = "y"
target = "t"
output = "loss"
)toml";

}  // namespace

TEST_CASE("adamw: the loader reads optimizer and locates every bad value", "[adamw][loader]") {
  const shardsim::Scenario s = shardsim::parse_scenario(
      "optimizer = { kind = \"adamw\", lr = 0.002, betas = [0.8, 0.99] }\n" + kHead, "s.toml");
  CHECK(s.adamw());
  CHECK(s.learning_rate == 0.002);
  CHECK(s.optimizer.beta1 == 0.8);
  CHECK(s.optimizer.beta2 == 0.99);
  CHECK(s.optimizer.eps == 1e-8);            // torch.optim.AdamW's defaults
  CHECK(s.optimizer.weight_decay == 1e-2);
  CHECK(shardsim::parse_scenario("optimizer = { kind = \"adamw\" }\n" + kHead, "s.toml")
            .learning_rate == 1e-3);

  const auto error = [](const std::string& optimizer) {
    return load_error(optimizer + "\n" + kHead);
  };
  const std::string unknown = error("optimizer = { kind = \"adam\" }");
  CHECK_THAT(unknown, Catch::StartsWith("s.toml:1:"));
  CHECK_THAT(unknown, Catch::Contains("optimizer.kind: unknown optimizer 'adam'"));
  CHECK_THAT(error("optimizer = { lr = 0.1 }"), Catch::Contains("missing required key 'kind'"));
  CHECK_THAT(error("optimizer = { kind = \"adamw\", betas = [0.9, 1.0] }"),
             Catch::Contains("optimizer.betas[1]: a beta is in [0, 1), got 1"));
  CHECK_THAT(error("optimizer = { kind = \"adamw\", betas = [0.9] }"),
             Catch::Contains("betas is a pair [beta1, beta2]"));
  CHECK_THAT(error("optimizer = { kind = \"adamw\", eps = 0.0 }"),
             Catch::Contains("optimizer.eps: eps must be > 0"));
  CHECK_THAT(error("optimizer = { kind = \"adamw\", weight_decay = -0.1 }"),
             Catch::Contains("optimizer.weight_decay: weight_decay must be >= 0"));
  CHECK_THAT(error("optimizer = { kind = \"adamw\", lr = 0.0 }"),
             Catch::Contains("optimizer.lr: lr must be > 0"));
  CHECK_THAT(error("optimizer = { kind = \"sgd\", betas = [0.9, 0.99] }"),
             Catch::Contains("betas"));
  CHECK_THAT(error("learning_rate = 0.1\noptimizer = { kind = \"adamw\" }"),
             Catch::Contains("give the learning rate once"));
  std::string forward_only = "optimizer = { kind = \"adamw\" }\n" + kHead;
  forward_only.replace(forward_only.find("train_steps = 2\n"), 16, "");
  CHECK_THAT(load_error(forward_only), Catch::Contains("an optimizer needs train_steps"));

  CHECK_THAT(error("faults = [\"adamw_bias_correction_missing\"]"),
             Catch::Contains("this scenario's optimizer is SGD"));
  CHECK_THAT(error("optimizer = { kind = \"adamw\", weight_decay = 0.0 }\n"
                   "faults = [\"adamw_decay_coupled\"]"),
             Catch::Contains("optimizer.weight_decay is 0"));
  CHECK(error("optimizer = { kind = \"adamw\" }\nfaults = [\"adamw_decay_coupled\"]").empty());
}
