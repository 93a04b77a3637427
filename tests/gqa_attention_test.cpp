// Tests for gqa_attention (ops/gqa_attention/, docs/ops/language-model.md "gqa_attention"): the
// kernel's grouping on a one-token sequence derived by hand, GQA against multi-head attention
// with the kv weights repeated, and the loader's placement rules and fault reachability. The whole
// model against PyTorch is tests/python/test_llama.py; the fault scenarios and their clean twins
// are judged by the replay of scenarios/ ([expect]).
#include "ops/gqa_attention/gqa.hpp"

#include <catch2/catch.hpp>
#include <string>

#include "scenario/scenario.hpp"
#include "scenario_test_support.hpp"
#include "tensor_test_support.hpp"

using shardsim::GqaActivations;
using shardsim::GqaGrads;
using shardsim::GqaParams;
using shardsim::Shape;
using shardsim::Tensor;
using scenario_test::load_error;

namespace {

Tensor<double> filled(const Shape& shape, double seed) {
  Tensor<double> t(shape);
  for (std::int64_t i = 0; i < t.numel(); ++i) t[i] = std::sin(seed + 0.7 * static_cast<double>(i));
  return t;
}

struct Weights {
  Tensor<double> x, wq, wk, wv, wo;
};

Weights weights(std::int64_t seq, std::int64_t heads, std::int64_t kv_heads) {
  const std::int64_t c = 5, d = 4;
  return {filled(Shape({{"batch", 2}, {"seq", seq}, {"hidden", c}}), 0.1),
          filled(Shape({{"hidden", c}, {"head", heads}, {"head_dim", d}}), 1.3),
          filled(Shape({{"hidden", c}, {"kv_head", kv_heads}, {"head_dim", d}}), 2.9),
          filled(Shape({{"hidden", c}, {"kv_head", kv_heads}, {"head_dim", d}}), 4.1),
          filled(Shape({{"head", heads}, {"head_dim", d}, {"hidden", c}}), 5.3)};
}

GqaParams params(std::int64_t heads, std::int64_t kv_heads) {
  GqaParams p;
  p.n_head = heads;
  p.n_kv_head = kv_heads;
  return p;
}

}  // namespace

TEST_CASE("gqa_attention: with one token each query head's output is its kv head's value",
          "[gqa]") {
  // One key: its softmax weight is exp(0) / exp(0) = 1 exactly, so attn[h] = v[kv(h)] bit for
  // bit, with kv(h) = h / 2 for 4 query heads over 2 kv heads, and h % 2 under the fault.
  const Weights w = weights(1, 4, 2);
  for (const bool wrong : {false, true}) {
    GqaParams p = params(4, 2);
    p.wrong_group = wrong;
    GqaActivations<double> acts;
    shardsim::gqa_forward(w.x, w.wq, w.wk, w.wv, w.wo, p, acts);
    for (std::int64_t b = 0; b < 2; ++b) {
      for (std::int64_t h = 0; h < 4; ++h) {
        const std::int64_t kv = wrong ? h % 2 : h / 2;
        for (std::int64_t d = 0; d < 4; ++d) {
          INFO("wrong_group " << wrong << " b " << b << " h " << h << " d " << d);
          CHECK(acts.attn[(b * 4 + h) * 4 + d] == acts.v[(b * 2 + kv) * 4 + d]);
        }
      }
    }
  }
}

TEST_CASE("gqa_attention: GQA is multi-head attention with each kv head repeated for its group",
          "[gqa]") {
  // wk_rep[:, h, :] = wk[:, h / G, :]: the same keys and values per query head, so the forward
  // and dq (hence dwq, dwo) agree bit for bit; a kv head's gradient is its group's sum, which GQA
  // takes before the projection and the repeated form after (other rounding: 1e-12).
  const std::int64_t heads = 6, kv_heads = 2, group = 3;
  const Weights w = weights(5, heads, kv_heads);
  const auto repeat = [&](const Tensor<double>& kv) {
    Tensor<double> out(Shape({{"hidden", 5}, {"kv_head", heads}, {"head_dim", 4}}));
    for (std::int64_t c = 0; c < 5; ++c) {
      for (std::int64_t h = 0; h < heads; ++h) {
        for (std::int64_t d = 0; d < 4; ++d) {
          out[(c * heads + h) * 4 + d] = kv[(c * kv_heads + h / group) * 4 + d];
        }
      }
    }
    return out;
  };
  const Tensor<double> wk_rep = repeat(w.wk), wv_rep = repeat(w.wv);
  GqaActivations<double> gqa, mha;
  shardsim::gqa_forward(w.x, w.wq, w.wk, w.wv, w.wo, params(heads, kv_heads), gqa);
  shardsim::gqa_forward(w.x, w.wq, wk_rep, wv_rep, w.wo, params(heads, heads), mha);
  CHECK(gqa.attn.values() == mha.attn.values());
  CHECK(gqa.y.values() == mha.y.values());

  const Tensor<double> dy = filled(w.x.shape(), 7.7);
  GqaGrads<double> g1, g2;
  Tensor<double> dq1(w.wq.shape()), dk1(w.wk.shape()), dv1(w.wv.shape()), do1(w.wo.shape());
  Tensor<double> dq2(w.wq.shape()), dk2(wk_rep.shape()), dv2(wv_rep.shape()), do2(w.wo.shape());
  shardsim::gqa_backward(dy, w.x, w.wq, w.wk, w.wv, w.wo, gqa, params(heads, kv_heads), g1, dq1,
                         dk1, dv1, do1);
  shardsim::gqa_backward(dy, w.x, w.wq, wk_rep, wv_rep, w.wo, mha, params(heads, heads), g2, dq2,
                         dk2, dv2, do2);
  CHECK(dq1.values() == dq2.values());
  CHECK(do1.values() == do2.values());
  for (std::int64_t c = 0; c < 5; ++c) {
    for (std::int64_t kv = 0; kv < kv_heads; ++kv) {
      for (std::int64_t d = 0; d < 4; ++d) {
        double k_sum = 0, v_sum = 0;
        for (std::int64_t h = kv * group; h < (kv + 1) * group; ++h) {
          k_sum += dk2[(c * heads + h) * 4 + d];
          v_sum += dv2[(c * heads + h) * 4 + d];
        }
        CHECK(dk1[(c * kv_heads + kv) * 4 + d] == Approx(k_sum).margin(1e-12));
        CHECK(dv1[(c * kv_heads + kv) * 4 + d] == Approx(v_sum).margin(1e-12));
      }
    }
  }
  for (std::int64_t i = 0; i < w.x.numel(); ++i) CHECK(g1.x[i] == Approx(g2.x[i]).margin(1e-12));
}

namespace {

// One gqa_attention over tp = RANKS: 4 query heads, KV kv heads; wq/wo and wk/wv placements.
std::string scenario(int ranks, int kv, const std::string& q_on, const std::string& kv_on,
                     const std::string& extra = "") {
  const std::string kvs = std::to_string(kv);
  return extra + R"(
name = "g"
precisions = ["f64"]
train_steps = 1
[mesh]
dims = { tp = )" + std::to_string(ranks) + R"( }
[[tensors]]
name = "x"
axes = ["batch", "seq", "hidden"]
shape = [1, 3, 4]
[[tensors]]
name = "t"
role = "target"
axes = ["batch", "seq", "hidden"]
shape = [1, 3, 4]
[[tensors]]
name = "wq"
role = "parameter"
axes = ["hidden", "head", "head_dim"]
shape = [4, 4, 2]
placement = ")" + q_on + R"("
[[tensors]]
name = "wk"
role = "parameter"
axes = ["hidden", "kv_head", "head_dim"]
shape = [4, )" + kvs + R"(, 2]
placement = ")" + kv_on + R"("
[[tensors]]
name = "wv"
role = "parameter"
axes = ["hidden", "kv_head", "head_dim"]
shape = [4, )" + kvs + R"(, 2]
placement = ")" + kv_on + R"("
[[tensors]]
name = "wo"
role = "parameter"
axes = ["head", "head_dim", "hidden"]
shape = [4, 2, 4]
placement = ")" + q_on + R"("
[[steps]]
op = "gqa_attention"
input = "x"
wq = "wq"
wk = "wk"
wv = "wv"
wo = "wo"
output = "a"
n_head = 4
n_kv_head = )" + kvs + R"(
head_dim = 2
[[steps]]
op = "redistribute"
input = "a"
output = "y"
to = "Replicate"
[[steps]]
op = "mse_loss"
input = "y"
target = "t"
output = "loss"
)";
}

}  // namespace

TEST_CASE("gqa_attention: the loader's placement rules and fault reachability", "[gqa][loader]") {
  CHECK(load_error(scenario(2, 2, "Shard(head)", "Shard(kv_head)")).empty());
  CHECK(load_error(scenario(4, 2, "Shard(head)", "Replicate")).empty());
  CHECK(load_error(scenario(4, 1, "Shard(head)", "Replicate")).empty());  // MQA
  CHECK_THAT(load_error(scenario(4, 2, "Shard(head)", "Shard(kv_head)")),
             Catch::Contains("steps[0].wk: Shard(kv_head) needs wq Shard(head) and the 4 ranks "
                             "dividing n_kv_head = 2"));
  CHECK_THAT(load_error(scenario(2, 3, "Shard(head)", "Replicate")),
             Catch::Contains("n_kv_head must divide n_head: 3 kv heads for 4 query heads"));
  CHECK_THAT(load_error(scenario(3, 2, "Shard(head)", "Replicate")),
             Catch::Contains("the 3 ranks of the step's dim must divide n_head = 4"));
  std::string mixed = scenario(2, 2, "Shard(head)", "Replicate");
  mixed.replace(mixed.rfind("placement = \"Shard(head)\""), 25, "placement = \"Replicate\"");
  CHECK_THAT(load_error(mixed), Catch::Contains("wq and wo split the query heads together"));

  CHECK(load_error(scenario(2, 2, "Shard(head)", "Replicate", "faults = [\"gqa_wrong_group\"]"))
            .empty());
  CHECK_THAT(load_error(scenario(4, 1, "Shard(head)", "Replicate",
                                 "faults = [\"gqa_wrong_group\"]")),
             Catch::Contains("no gqa_attention here has two or more kv heads"));
  CHECK_THAT(load_error(scenario(2, 2, "Shard(head)", "Shard(kv_head)",
                                 "faults = [\"gqa_wrong_group\"]")),
             Catch::Contains("with wk and wv Replicate on its dim"));
  CHECK(load_error(scenario(4, 2, "Shard(head)", "Replicate",
                            "faults = [\"gqa_kv_grad_unreduced\"]"))
            .empty());
  CHECK_THAT(load_error(scenario(2, 2, "Shard(head)", "Shard(kv_head)",
                                 "faults = [\"gqa_kv_grad_unreduced\"]")),
             Catch::Contains("splits its query heads over two or more ranks with wk and wv "
                             "Replicate"));
}
