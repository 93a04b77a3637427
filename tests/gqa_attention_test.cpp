// Tests for gqa_attention (ops/gqa_attention/, docs/ops/language-model.md "gqa_attention"): the
// kernel's grouping on a one-token sequence derived by hand, GQA against multi-head attention
// with the kv weights repeated, and the loader's placement rules and fault reachability. The whole
// model against PyTorch is tests/python/test_llama.py; the fault scenarios and their clean twins
// are judged by the replay of scenarios/ ([expect]).
#include "ops/gqa_attention/gqa.hpp"

#include <catch2/catch.hpp>
#include <limits>
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

TEST_CASE("gqa_attention: context parallel pieces reassemble the dense kernel",
          "[gqa][cp]") {
  // The pieces gqa_cp_plan.hpp runs per rank, on a sequence of 6 split 0-2 | 3-5 (2 query heads
  // per kv head). allgather: the second half's queries at positions 3-5 against every key are
  // the dense rows bit for bit (a row reads only its own scores). ring: the two key blocks merged
  // by log-sum-exp, and the block backward summed over both blocks, give the dense values up to
  // rounding (a reordered sum).
  const std::int64_t heads = 4, kv_heads = 2, seq = 6;
  const Weights w = weights(seq, heads, kv_heads);
  const GqaParams p = params(heads, kv_heads);
  GqaActivations<double> dense;
  shardsim::gqa_forward(w.x, w.wq, w.wk, w.wv, w.wo, p, dense);
  const std::vector<std::int64_t> all = shardsim::position_range(0, seq);
  const std::vector<std::int64_t> first = shardsim::position_range(0, 3);
  const std::vector<std::int64_t> second = shardsim::position_range(3, 3);
  const auto half = [](const Tensor<double>& t, std::int64_t begin) {
    return shardsim::slice_along(t, "seq", begin, 3);
  };
  shardsim::GqaRows<double> rows;  // the second half's rows at their global positions
  shardsim::gqa_rows_forward(half(w.x, 3), w.wq, w.wk, w.wv, p, second, rows);
  CHECK(rows.q_rot.values() == half(dense.q_rot, 3).values());
  CHECK(rows.k_rot.values() == half(dense.k_rot, 3).values());

  Tensor<double> out;
  shardsim::AttentionSaved<double> saved;
  shardsim::gqa_attend(rows.q_rot, second, dense.k_rot, dense.v, all, p, out, saved);
  CHECK(out.values() == half(dense.attn, 3).values());

  Tensor<double> merged(rows.q_rot.shape()), lse(rows.q_rot.shape().without("head_dim"));
  for (double& v : lse.values()) v = -std::numeric_limits<double>::infinity();
  for (const std::int64_t block : {3, 0}) {  // own block first, as the ring's arrival order
    Tensor<double> block_out;
    shardsim::AttentionSaved<double> block_saved;
    shardsim::gqa_attend(rows.q_rot, second, half(dense.k_rot, block), half(dense.v, block),
                         block == 0 ? first : second, p, block_out, block_saved);
    shardsim::attention_merge(merged, lse, block_out, block_saved.lse);
  }
  for (std::int64_t i = 0; i < merged.numel(); ++i) {
    CHECK(merged[i] == Approx(out[i]).margin(1e-14));
  }

  // Backward of the second half's queries: the full-key backward against the sum of the two
  // block backwards from the merged results.
  const Tensor<double> dout = filled(out.shape(), 3.3);
  Tensor<double> dq_full, dk_full, dv_full;
  shardsim::gqa_attend_backward(dout, rows.q_rot, second, dense.k_rot, dense.v, all, saved, p,
                                dq_full, dk_full, dv_full);
  Tensor<double> dq(rows.q_rot.shape());
  for (const std::int64_t block : {3, 0}) {
    Tensor<double> dk(half(dense.k_rot, 0).shape()), dv(half(dense.v, 0).shape());
    shardsim::gqa_attend_block_backward(dout, rows.q_rot, second, half(dense.k_rot, block),
                                        half(dense.v, block), block == 0 ? first : second, out,
                                        saved.lse, p, dq, dk, dv);
    const Tensor<double> dk_ref = half(dk_full, block), dv_ref = half(dv_full, block);
    for (std::int64_t i = 0; i < dk.numel(); ++i) {
      CHECK(dk[i] == Approx(dk_ref[i]).margin(1e-13));
      CHECK(dv[i] == Approx(dv_ref[i]).margin(1e-13));
    }
  }
  for (std::int64_t i = 0; i < dq.numel(); ++i) CHECK(dq[i] == Approx(dq_full[i]).margin(1e-13));
}

namespace {

// One gqa_attention on cp x tp = 2 x 2 with x placed `x_on` ({ cp = ..., tp = ... }), heads
// split over tp, and `extra` keys on the step.
std::string cp_scenario(const std::string& x_on, const std::string& extra = "",
                        const std::string& mesh_dim = "tp") {
  std::string text = scenario(2, 2, "Shard(head)", "Shard(kv_head)");
  const auto replace = [&](const std::string& from, const std::string& to) {
    text.replace(text.find(from), from.size(), to);
  };
  replace("dims = { tp = 2 }", "dims = { cp = 2, tp = 2 }");
  replace("shape = [1, 3, 4]\n", "shape = [1, 3, 4]\nplacement = " + x_on + "\n");
  replace("shape = [1, 3, 4]\n[[tensors]]\nname = \"wq\"",
          "shape = [1, 3, 4]\nplacement = " + x_on + "\n[[tensors]]\nname = \"wq\"");
  for (const char* w : {"wq", "wk", "wv", "wo"}) {
    const std::string at = "name = \"" + std::string(w) + "\"";
    const std::size_t from = text.find("placement = \"", text.find(at));
    const std::size_t end = text.find('\n', from);
    const std::string on = text.substr(from + 13, end - from - 14);
    text.replace(from, end - from, "placement = { tp = \"" + on + "\" }");
  }
  replace("head_dim = 2\n[[steps]]", "head_dim = 2\nmesh_dim = \"" + mesh_dim + "\"\n" + extra +
                                         "[[steps]]");
  replace("to = \"Replicate\"", "to = \"Replicate\"\nmesh_dim = \"tp\"");
  replace("output = \"loss\"", "output = \"loss\"\nmesh_dim = \"cp\"");
  return text;
}

}  // namespace

TEST_CASE("gqa_attention: the loader's context-parallel rules", "[gqa][cp][loader]") {
  CHECK(load_error(cp_scenario("{ cp = \"Shard(seq)\" }")).empty());
  CHECK(load_error(cp_scenario("{ cp = \"Shard(seq, zigzag)\" }", "cp_mode = \"ring\"\n")).empty());
  CHECK_THAT(load_error(cp_scenario("{ cp = \"Replicate\" }", "cp_mode = \"ring\"\n")),
             Catch::Contains("steps[0].cp_mode: cp_mode is set but 'x' is not Shard(seq) on any "
                             "mesh dim"));
  CHECK_THAT(load_error(cp_scenario("{ cp = \"Shard(seq, padded)\" }")),
             Catch::Contains("context parallelism needs every position a real token"));
  // ulysses splits each tp rank's heads again over cp: tp must come first in the mesh.
  CHECK_THAT(load_error(cp_scenario("{ cp = \"Shard(seq)\" }", "cp_mode = \"ulysses\"\n")),
             Catch::Contains("ulysses splits each rank's query heads over the cp dim 'cp': list "
                             "the heads' dim 'tp' before it in [mesh] dims"));
  std::string tp_first = cp_scenario("{ cp = \"Shard(seq)\" }", "cp_mode = \"ulysses\"\n");
  tp_first.replace(tp_first.find("dims = { cp = 2, tp = 2 }"), 25, "dims = { tp = 2, cp = 2 }");
  CHECK(load_error(tp_first).empty());
  tp_first.replace(tp_first.find("dims = { tp = 2, cp = 2 }"), 25, "dims = { tp = 2, cp = 4 }");
  CHECK_THAT(load_error(tp_first),
             Catch::Contains("ulysses gives each cp rank whole query heads: 2 per rank do not "
                             "divide over the 4 cp ranks"));
  CHECK_THAT(load_error(cp_scenario("{ cp = \"Shard(seq)\" }", "cp_mode = \"halo\"\n")),
             Catch::Contains("halo"));
  // No KV cache across streamed chunks: [stream] on seq is refused at the step.
  CHECK_THAT(load_error(cp_scenario("{ cp = \"Shard(seq)\" }") +
                        "[stream]\naxis = \"seq\"\nchunks = [2, 1]\n"),
             Catch::Contains("steps[0]: gqa_attention keeps no KV cache across streamed chunks"));
  CHECK_THAT(load_error(cp_scenario("{ cp = \"Shard(seq)\", tp = \"Shard(seq)\" }")),
             Catch::Contains("splits seq on two mesh dims"));
  CHECK_THAT(load_error(cp_scenario("{ tp = \"Shard(seq)\" }", "", "tp")),
             Catch::Contains("the heads split on the step's dim, where 'x' is Shard(seq)"));
}
