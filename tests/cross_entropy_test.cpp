// Tests for ops/cross_entropy/ and the i64 tensors it reads (docs/ops/language-model.md): the
// kernels on hand-derived values, label smoothing and the z-loss against PyTorch's definitional
// form, ignored tokens, the vocab-parallel parts summed over shards, randint's draw, and the
// loader's located errors for bad ids and misused integer tensors. The whole step against
// PyTorch autograd is tests/python/test_cross_entropy.py; the fault scenarios and their clean
// twins are judged by the replay of scenarios/ ([expect]).
#include "ops/cross_entropy/cross_entropy.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "core/rng.hpp"
#include "ops/cross_entropy/cross_entropy_plan.hpp"
#include "scenario/scenario.hpp"
#include "scenario_test_support.hpp"
#include "tensor_test_support.hpp"

using shardsim::CrossEntropyParams;
using shardsim::Shape;
using shardsim::Tensor;
using shardsim::VocabColumns;
using tensor_test::make;

namespace {

struct Parts {
  Tensor<double> max, sumexp, target, sum, lse, loss;
};

// Every part of the forward over all C classes of `x` [tok, vocab].
Parts forward(const Tensor<double>& x, const std::vector<std::int64_t>& labels,
              const CrossEntropyParams& params) {
  const Shape tokens({{"tok", static_cast<std::int64_t>(labels.size())}});
  Parts p{Tensor<double>(tokens), Tensor<double>(tokens), Tensor<double>(tokens),
          Tensor<double>(tokens), Tensor<double>(tokens), Tensor<double>(tokens)};
  const VocabColumns all{0, params.vocab};
  shardsim::ce_row_max(x, all, false, p.max);
  shardsim::ce_row_sumexp(x, all, false, p.max, p.sumexp);
  shardsim::ce_row_target(x, all, labels, params, false, p.target);
  shardsim::ce_row_sum(x, all, p.sum);
  shardsim::ce_token_loss(p.max, p.sumexp, p.target, p.sum, labels, params, p.lse, p.loss);
  return p;
}

const std::string kHead = R"toml(
name = "ce"
precisions = ["f64"]
[mesh]
dims = { dp = 1, tp = 2 }
[[tensors]]
name = "h"
axes = ["batch", "seq", "hidden"]
shape = [2, 3, 4]
[[tensors]]
name = "w"
role = "parameter"
axes = ["vocab", "hidden"]
shape = [5, 4]
placement = { dp = "Replicate", tp = "Shard(vocab)" }
)toml";

const std::string kSteps = R"toml(
[[steps]]
op = "linear"
input = "h"
weight = "w"
output = "logits"
parallel = "column"
mesh_dim = "tp"
[[steps]]
op = "cross_entropy"
input = "logits"
labels = "labels"
output = "loss"
mesh_dim = "tp"
)toml";

std::string labels_tensor(const std::string& init, const std::string& extra = "") {
  return "[[tensors]]\nname = \"labels\"\ndtype = \"i64\"\naxes = [\"batch\", \"seq\"]\n"
         "shape = [2, 3]\ninit = " +
         init + "\n" + extra;
}

}  // namespace

TEST_CASE("cross_entropy on equal logits: loss log C, gradient 1/C - [c = y], exactly",
          "[cross_entropy]") {
  // x = 0 for all C = 4 classes: M = 0, S = 4 exp(0) = 4, lse = log 4 + 0, and the target logit
  // is 0, so l = log 4 for either token. p_c = exp(0) / 4 = 1/4 exactly; dx = (1/4 - [c = y]) / V
  // with V = 2: 1/8 and -3/8, exact in binary.
  const auto x = make<double>(Shape({{"tok", 2}, {"vocab", 4}}), std::vector<double>(8, 0.0));
  const std::vector<std::int64_t> labels{1, 3};
  const CrossEntropyParams params{.vocab = 4};
  const Parts p = forward(x, labels, params);
  for (std::int64_t t = 0; t < 2; ++t) {
    CHECK(p.max[t] == 0.0);
    CHECK(p.sumexp[t] == 4.0);
    CHECK(p.lse[t] == std::log(4.0));
    CHECK(p.loss[t] == std::log(4.0));
  }
  double sum = 0;
  std::int64_t count = 0;
  shardsim::ce_sum_tokens(p.loss, labels, params, false, sum, count);
  CHECK(count == 2);
  Tensor<double> dx;
  shardsim::ce_backward(x, {0, 4}, labels, p.max, p.sumexp, p.lse, params, false, 2.0, dx);
  for (std::int64_t c = 0; c < 4; ++c) {
    CHECK(dx[c] == (c == 1 ? -0.375 : 0.125));
    CHECK(dx[4 + c] == (c == 3 ? -0.375 : 0.125));
  }
}

TEST_CASE("cross_entropy: label smoothing and z-loss follow PyTorch's and PaLM's definitions",
          "[cross_entropy]") {
  // PyTorch: l = (1 - eps)(lse - x_y) + (eps / C) sum_c (lse - x_c); PaLM adds z lse^2. Evaluated
  // here term by term in long double from std::exp/std::log, a different arithmetic from the
  // kernel's lse - (1 - eps) x_y - (eps / C) sum_c x_c, so agreement to a few f64 epsilons is
  // evidence that the kernel's rearrangement is the definition.
  const std::vector<double> row{1.5, -0.25, 3.0, 0.5, -2.0};
  const auto x = make<double>(Shape({{"tok", 1}, {"vocab", 5}}), row);
  const CrossEntropyParams params{.label_smoothing = 0.1, .z_loss = 1e-3, .vocab = 5};
  const Parts p = forward(x, {2}, params);
  long double sum_exp = 0;
  for (double v : row) sum_exp += std::exp(static_cast<long double>(v));
  const long double lse = std::log(sum_exp);
  long double smooth = 0;
  for (double v : row) smooth += lse - v;
  const long double expected = 0.9L * (lse - 3.0L) + 0.1L / 5 * smooth + 1e-3L * lse * lse;
  CHECK(std::fabs(p.loss[0] - static_cast<double>(expected)) <= 4 * 0x1p-52 * expected);
  // The gradient against central finite differences of the long double definition.
  Tensor<double> dx;
  shardsim::ce_backward(x, {0, 5}, {2}, p.max, p.sumexp, p.lse, params, false, 1.0, dx);
  for (std::size_t c = 0; c < row.size(); ++c) {
    auto loss_at = [&](long double shift) {
      std::vector<long double> v(row.begin(), row.end());
      v[c] += shift;
      long double s = 0, a = 0;
      for (long double e : v) s += std::exp(e), a += e;
      const long double l = std::log(s);
      return 0.9L * (l - v[2]) + 0.1L / 5 * (5 * l - a) + 1e-3L * l * l;
    };
    const long double h = 1e-6L;
    const double fd = static_cast<double>((loss_at(h) - loss_at(-h)) / (2 * h));
    CHECK(std::fabs(dx[static_cast<std::int64_t>(c)] - fd) <= 1e-8);
  }
}

TEST_CASE("cross_entropy: an ignored token counts nowhere, the fault counts it", "[cross_entropy]") {
  // Token 0 is ignored (-100), token 1 is class 0 of two equal logits: l = log 2. Its mean over
  // one counted token is log 2; counting the ignored token too halves it.
  const auto x = make<double>(Shape({{"tok", 2}, {"vocab", 2}}), {5.0, -1.0, 0.0, 0.0});
  const std::vector<std::int64_t> labels{-100, 0};
  const CrossEntropyParams params{.vocab = 2};
  const Parts p = forward(x, labels, params);
  CHECK(p.loss[0] == 0.0);
  CHECK(p.target[0] == 0.0);
  double sum = 0;
  std::int64_t count = 0;
  shardsim::ce_sum_tokens(p.loss, labels, params, false, sum, count);
  CHECK(count == 1);
  CHECK(sum == std::log(2.0));
  double faulty_sum = 0;
  std::int64_t faulty_count = 0;
  shardsim::ce_sum_tokens(p.loss, labels, params, true, faulty_sum, faulty_count);
  CHECK(faulty_count == 2);
  // A padding position (kPadToken) is never a token, even to the fault.
  std::int64_t pad_count = 0;
  double pad_sum = 0;
  shardsim::ce_sum_tokens(p.loss, {shardsim::kPadToken, 0}, params, true, pad_sum, pad_count);
  CHECK(pad_count == 1);
  Tensor<double> dx;
  shardsim::ce_backward(x, {0, 2}, labels, p.max, p.sumexp, p.lse, params, false, 1.0, dx);
  CHECK(dx[0] == 0.0);
  CHECK(dx[1] == 0.0);
  CHECK(dx[2] == -0.5);
  CHECK(dx[3] == 0.5);
}

TEST_CASE("cross_entropy: the vocab-parallel parts of two shards give the dense parts",
          "[cross_entropy]") {
  // 5 classes split 3 + 2, the second shard padded to 3 columns (a padded split; the padding
  // column holds a value the plan must never read). The max of the shards' maxima is the dense
  // max; the shards' target logits sum to it (one is 0); the sums of exp(x - M) add up to the
  // dense sum up to rounding (2 + 3 terms against 5). The fault ce_target_every_rank reads the
  // non-owner's column 0.
  const std::vector<double> row{0.5, 2.0, -1.0, 1.25, 0.75};
  const auto dense = make<double>(Shape({{"tok", 1}, {"vocab", 5}}), row);
  const auto left = make<double>(Shape({{"tok", 1}, {"vocab", 3}}), {0.5, 2.0, -1.0});
  const auto right = make<double>(Shape({{"tok", 1}, {"vocab", 3}}), {1.25, 0.75, 99.0});
  const CrossEntropyParams params{.vocab = 5};
  const std::vector<std::int64_t> label{3};
  const Parts d = forward(dense, label, params);
  const Shape one({{"tok", 1}});
  Tensor<double> m0(one), m1(one), s0(one), s1(one), t0(one), t1(one);
  shardsim::ce_row_max(left, {0, 3}, false, m0);
  shardsim::ce_row_max(right, {3, 2}, false, m1);
  CHECK(std::max(m0[0], m1[0]) == d.max[0]);
  CHECK(m1[0] == 1.25);  // the padding's 99 is not read
  shardsim::ce_row_sumexp(left, {0, 3}, false, d.max, s0);
  shardsim::ce_row_sumexp(right, {3, 2}, false, d.max, s1);
  CHECK(std::fabs(s0[0] + s1[0] - d.sumexp[0]) <= 4 * 0x1p-52 * d.sumexp[0]);
  shardsim::ce_row_target(left, {0, 3}, label, params, false, t0);
  shardsim::ce_row_target(right, {3, 2}, label, params, false, t1);
  CHECK(t0[0] == 0.0);
  CHECK(t0[0] + t1[0] == d.target[0]);
  shardsim::ce_row_target(left, {0, 3}, label, params, true, t0);
  CHECK(t0[0] == 0.5);  // the fault: column 0 of the rank without class 3
  // vocab_padding_in_softmax: the padding column enters the max.
  shardsim::ce_row_max(right, {3, 2}, true, m1);
  CHECK(m1[0] == 99.0);
}

TEST_CASE("frame_labels maps a shard's tokens to the global labels, padding to kPadToken",
          "[cross_entropy]") {
  // labels [batch = 2, seq = 3] = 0..5 row-major. A rank holding seq [1:3) of both rows, and a
  // micro-batch whose rows start at batch 1: its local row 0 is global row 1.
  const Shape labels({{"batch", 2}, {"seq", 3}});
  const std::vector<std::int64_t> ids{0, 1, 2, 3, 4, 5};
  shardsim::TokenFrame frame{.shares = {{0, 2, 2}, {1, 3, 3}}, .batch_axis = "batch"};
  CHECK(shardsim::frame_labels(labels, ids, frame) ==
        std::vector<std::int64_t>{1, 2, shardsim::kPadToken, 4, 5, shardsim::kPadToken});
  shardsim::TokenFrame micro{
      .shares = {{0, 1, 1}, {0, 3, 3}}, .batch_axis = "batch", .batch_begin = 1};
  CHECK(shardsim::frame_labels(labels, ids, micro) == std::vector<std::int64_t>{3, 4, 5});
}

TEST_CASE("randint draws every value in low..high-1 from the init counter", "[cross_entropy]") {
  // Element i depends on (seed, i) only; over 4000 draws of [-1, 3) every value appears, none
  // outside, and a different seed gives a different sequence.
  std::vector<int> seen(4, 0);
  bool differs = false;
  for (std::uint64_t i = 0; i < 4000; ++i) {
    const std::int64_t v = shardsim::randint_value(-1, 3, 46, i);
    REQUIRE(v >= -1);
    REQUIRE(v < 3);
    ++seen[static_cast<std::size_t>(v + 1)];
    CHECK(v == shardsim::randint_value(-1, 3, 46, i));
    differs = differs || v != shardsim::randint_value(-1, 3, 47, i);
  }
  for (int n : seen) CHECK(n > 800);
  CHECK(differs);
}

TEST_CASE("the loader locates bad labels and misused i64 tensors", "[cross_entropy][loader]") {
  using scenario_test::load_error;
  // A label of 5 with 5 classes: randint(0, 6) over 6 elements, at the first init seed whose
  // draw holds a 5 (the loader must name that element; every other draw loads).
  bool found = false;
  for (int seed = 0; seed < 64 && !found; ++seed) {
    const std::string text =
        kHead + labels_tensor("{ dist = \"randint\", low = 0, high = 6, seed = " +
                              std::to_string(seed) + " }") +
        kSteps;
    const std::string error = load_error(text);
    if (error.empty()) continue;
    found = true;
    CHECK_THAT(error, Catch::Contains("steps[1].labels: element ["));
    CHECK_THAT(error, Catch::Contains("is 5: a label is a class in [0, 5) or ignore_index (-100)"));
  }
  CHECK(found);
  // Every label ignored.
  CHECK_THAT(load_error(kHead +
                        labels_tensor("{ dist = \"randint\", low = -1, high = 0 }") + kSteps +
                        "ignore_index = -1\n"),
             Catch::Contains("every label of 'labels' is ignore_index (-1)"));
  // An i64 tensor where a floating one is needed, and the reverse.
  CHECK_THAT(load_error(kHead + labels_tensor("{ dist = \"randint\", low = 0, high = 5 }") +
                        "[[steps]]\nop = \"gelu\"\ninput = \"labels\"\noutput = \"g\"\n"
                        "mesh_dim = \"tp\"\n"),
             Catch::Contains("'labels' is an i64 tensor (token ids or labels); gelu needs a "
                             "floating tensor here"));
  std::string floating_labels = kHead + kSteps;
  floating_labels.replace(floating_labels.find("labels = \"labels\""), 17, "labels = \"h\"");
  CHECK_THAT(load_error(floating_labels),
             Catch::Contains("'h' is a floating tensor; labels names an i64 tensor"));
  // randint on a floating tensor, a parameter of dtype i64, an unknown dtype, no init.
  CHECK_THAT(load_error(kHead + "[[tensors]]\nname = \"u\"\naxes = [\"a\"]\nshape = [2]\n"
                                "init = { dist = \"randint\", low = 0, high = 2 }\n" + kSteps),
             Catch::Contains("declare the tensor dtype = \"i64\""));
  CHECK_THAT(load_error(kHead + labels_tensor("{ dist = \"randint\", low = 0, high = 5 }",
                                              "role = \"parameter\"\n") +
                        kSteps),
             Catch::Contains("an i64 tensor is data, not a parameter"));
  std::string f16 = kHead + labels_tensor("{ dist = \"randint\", low = 0, high = 5 }") + kSteps;
  f16.replace(f16.find("dtype = \"i64\""), 13, "dtype = \"f16\"");
  CHECK_THAT(load_error(f16), Catch::Contains("unknown dtype 'f16'"));
  CHECK_THAT(load_error(kHead + labels_tensor("{ dist = \"normal\" }") + kSteps),
             Catch::Contains("an i64 tensor is drawn with dist = \"randint\""));
  CHECK_THAT(load_error(kHead + labels_tensor("{ dist = \"randint\", low = 3, high = 3 }") +
                        kSteps),
             Catch::Contains("randint init needs low < high"));
  // Labels held differently from the logits' tokens.
  CHECK_THAT(load_error(kHead +
                        labels_tensor("{ dist = \"randint\", low = 0, high = 5 }",
                                      "placement = { dp = \"Replicate\", tp = \"Shard(seq)\" }\n") +
                        kSteps),
             Catch::Contains("placement mismatch on mesh dim 'tp'"));
}

TEST_CASE("a clean vocab-parallel cross-entropy passes and loads its labels", "[cross_entropy]") {
  const std::string text =
      kHead + labels_tensor("{ dist = \"randint\", low = 0, high = 5 }") + kSteps;
  REQUIRE(scenario_test::load_error(text).empty());
  const shardsim::Scenario s = shardsim::parse_scenario(text, "s.toml");
  REQUIRE(s.find_ids("labels") != nullptr);
  CHECK(s.find_tensor("labels") == nullptr);  // never a floating tensor
  const std::vector<std::int64_t>& ids = *s.find_ids("labels")->ids;
  REQUIRE(ids.size() == 6);
  const std::uint64_t seed = s.seed ^ shardsim::fnv1a64("labels");
  for (std::size_t i = 0; i < ids.size(); ++i) {
    CHECK(ids[i] == shardsim::randint_value(0, 5, seed, i));
  }
}
