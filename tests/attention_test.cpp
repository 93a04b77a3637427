// Tests for the kernels of ops/attention/attention.hpp and ops/attention/project.hpp:
// hand-derived known answers for the mask rule and the softmax, the log-sum-exp merge (fully
// masked blocks merge without NaN; block merges agree with the dense softmax in mp),
// finite-difference gradients in mp for the dense and the block backward, and the documented
// summation orders checked bitwise against textbook loops. The streamed oracle
// (ops/attention/stream.hpp) is tested in attention_stream_test.cpp.
#include "ops/attention/attention.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/mp.hpp"
#include "core/rng.hpp"
#include "ops/attention/project.hpp"
#include "ops/attention/rope.hpp"
#include "tensor_test_support.hpp"

using shardsim::AttentionParams;
using shardsim::AttentionSaved;
using shardsim::head_shape;
using shardsim::Mp;
using shardsim::position_range;
using shardsim::Shape;
using shardsim::Tensor;

using tensor_test::seeded_normal;

namespace {

double to_double(const Mp& v) { return shardsim::round_to_f64(v); }

// max |a - b| / max |b| over all elements.
double normwise_gap(const Tensor<Mp>& a, const Tensor<Mp>& b) {
  double scale = 0, gap = 0;
  for (std::int64_t i = 0; i < b.numel(); ++i) {
    scale = std::max(scale, std::fabs(to_double(b[i])));
    gap = std::max(gap, std::fabs(to_double(Mp(a[i] - b[i]))));
  }
  return scale == 0 ? gap : gap / scale;
}

}  // namespace

TEST_CASE("the mask allows key j for query i iff 0 <= q_pos - k_pos < window", "[attention]") {
  // q = 0, so every score is 0 and each allowed key gets weight 1/count; with one-hot values the
  // output lists the weights. Query at 5, keys at 3, 4, 5, 6 (deltas 2, 1, 0, -1).
  const Tensor<double> q(head_shape(1, "seq", 1, 1, 4));
  const Tensor<double> k(head_shape(1, "kv", 4, 1, 4));
  Tensor<double> v(head_shape(1, "kv", 4, 1, 4));
  for (std::int64_t j = 0; j < 4; ++j) v[j * 4 + j] = 1;
  const std::vector<std::int64_t> q_pos{5};
  const std::vector<std::int64_t> k_pos{3, 4, 5, 6};
  auto run = [&](const AttentionParams& params) {
    Tensor<double> out;
    AttentionSaved<double> saved;
    shardsim::attention_forward(q, q_pos, k, v, k_pos, params, out, saved);
    return out.values();
  };
  AttentionParams window2;
  window2.window = 2;  // deltas 1 and 0: keys 4 and 5
  CHECK(run(window2) == std::vector<double>{0, 0.5, 0.5, 0});
  AttentionParams causal;  // deltas 2, 1, 0: keys 3, 4, 5; key 6 is in the future
  CHECK(run(causal) == std::vector<double>{1.0 / 3, 1.0 / 3, 1.0 / 3, 0});
  AttentionParams window1;
  window1.window = 1;  // only the query's own position
  CHECK(run(window1) == std::vector<double>{0, 0, 1, 0});
  AttentionParams off_by_one = window2;
  off_by_one.window_inclusive = true;  // the fault: delta <= 2 also lets key 3 in
  CHECK(run(off_by_one) == std::vector<double>{1.0 / 3, 1.0 / 3, 1.0 / 3, 0});
}

TEST_CASE("attention known answer: two keys, scores 0 and log 3", "[attention]") {
  // D = 4, scale = 1/2. q = [2 log 3, 0, 0, 0], k0 = 0, k1 = [1, 0, 0, 0]:
  //   s0 = 0, s1 = (2 log 3) * 1 / 2 = log 3; m = log 3; e = [1/3, 1]; l = 4/3
  //   out = (v0 / 3 + v1) / (4/3) = v0 / 4 + 3 v1 / 4;  lse = log 3 + log(4/3) = log 4.
  // v0 = [4, 0, 0, 8], v1 = [0, 4, 0, -8] -> out = [1, 3, 0, -4].
  shardsim::set_mp_precision(256);
  const Mp log3 = log(Mp(3));
  Tensor<Mp> q(head_shape(1, "seq", 1, 1, 4), {2 * log3, 0, 0, 0});
  Tensor<Mp> k(head_shape(1, "kv", 2, 1, 4), {0, 0, 0, 0, 1, 0, 0, 0});
  Tensor<Mp> v(head_shape(1, "kv", 2, 1, 4), {4, 0, 0, 8, 0, 4, 0, -8});
  Tensor<Mp> out;
  AttentionSaved<Mp> saved;
  shardsim::attention_forward(q, {1}, k, v, {0, 1}, AttentionParams{}, out, saved);
  const double expected[4] = {1, 3, 0, -4};
  // A handful of correctly rounded operations at 257 bits: 2^-250 absolute is ample and still
  // rejects any real formula error.
  for (int i = 0; i < 4; ++i) CHECK(std::fabs(to_double(out[i]) - expected[i]) <= 0x1p-250);
  CHECK(std::fabs(to_double(Mp(saved.lse[0] - log(Mp(4))))) <= 0x1p-250);
}

TEMPLATE_TEST_CASE("a query with no allowed key gives out = 0 and lse = -inf", "[attention]", float,
                   double, Mp) {
  using std::isinf;
  shardsim::set_mp_precision(256);
  const Tensor<TestType> q = seeded_normal<TestType>(head_shape(1, "seq", 2, 2, 4), 3);
  const Tensor<TestType> k = seeded_normal<TestType>(head_shape(1, "kv", 3, 2, 4), 4);
  const Tensor<TestType> v = seeded_normal<TestType>(head_shape(1, "kv", 3, 2, 4), 5);
  AttentionParams params;
  params.window = 2;
  Tensor<TestType> out;
  AttentionSaved<TestType> saved;
  // Queries at 10, 11; keys at 0, 1, 2: every delta >= 8 is outside the window.
  shardsim::attention_forward(q, {10, 11}, k, v, {0, 1, 2}, params, out, saved);
  for (const TestType& value : out.values()) CHECK(value == TestType(0));
  for (const TestType& value : saved.lse.values()) {
    CHECK(isinf(value));
    CHECK(value < TestType(0));
  }
}

TEMPLATE_TEST_CASE("merging a fully masked block is a no-op, never NaN", "[attention]", float,
                   double, Mp) {
  using std::isinf;
  using std::isnan;
  shardsim::set_mp_precision(256);
  const Shape shape = head_shape(1, "seq", 3, 2, 4);
  const Tensor<TestType> block_out = seeded_normal<TestType>(shape, 7);
  Tensor<TestType> block_lse = seeded_normal<TestType>(shape.without("head_dim"), 8);
  Tensor<TestType> masked_lse(block_lse.shape());
  for (TestType& value : masked_lse.values()) value = shardsim::negative_infinity<TestType>();
  const Tensor<TestType> zeros(shape);

  // Running (0, -inf) merged with a fully masked block: stays (0, -inf). With the naive formula
  // m = max(-inf, -inf) = -inf and exp(-inf - -inf) = exp(NaN).
  Tensor<TestType> out(shape), lse = masked_lse;
  shardsim::attention_merge(out, lse, zeros, masked_lse);
  for (const TestType& value : out.values()) CHECK(value == TestType(0));
  for (const TestType& value : lse.values()) CHECK((isinf(value) && value < TestType(0)));

  // Running (0, -inf) merged with a real block takes it bit for bit.
  shardsim::attention_merge(out, lse, block_out, block_lse);
  CHECK(out.values() == block_out.values());
  CHECK(lse.values() == block_lse.values());

  // A real running result merged with a masked block is unchanged bit for bit.
  shardsim::attention_merge(out, lse, zeros, masked_lse);
  CHECK(out.values() == block_out.values());
  CHECK(lse.values() == block_lse.values());
  for (const TestType& value : out.values()) CHECK(!isnan(value));
}

TEST_CASE("block attention merged by log-sum-exp equals dense attention in mp256",
          "[attention][mp]") {
  // Split the keys into blocks (some fully masked by the window), attend per block, merge in
  // several orders: the result is the dense softmax up to rounding. Each merged value carries a
  // few dozen roundings at 257 bits; 2^-241 = 2^-(257 - 16) relative to max |out| is the
  // project's mp tolerance for reordered arithmetic (2^16 units) and leaves room for that.
  shardsim::set_mp_precision(256);
  const Tensor<Mp> q = seeded_normal<Mp>(head_shape(2, "seq", 6, 2, 4), 11);
  const Tensor<Mp> k = seeded_normal<Mp>(head_shape(2, "kv", 11, 2, 4), 12);
  const Tensor<Mp> v = seeded_normal<Mp>(head_shape(2, "kv", 11, 2, 4), 13);
  const std::vector<std::int64_t> q_pos = position_range(5, 6);  // 5 .. 10
  const std::vector<std::int64_t> k_pos = position_range(0, 11);
  AttentionParams params;
  params.window = 4;
  Tensor<Mp> dense;
  AttentionSaved<Mp> dense_saved;
  shardsim::attention_forward(q, q_pos, k, v, k_pos, params, dense, dense_saved);
  const std::vector<std::vector<std::int64_t>> bounds = {{0, 3, 6, 9, 11}, {0, 11}, {0, 1, 2, 11}};
  for (const auto& cuts : bounds) {
    for (bool reverse : {false, true}) {
      Tensor<Mp> out(q.shape());
      Tensor<Mp> lse(dense_saved.lse.shape());
      for (Mp& value : lse.values()) value = shardsim::negative_infinity<Mp>();
      const std::size_t blocks = cuts.size() - 1;
      for (std::size_t n = 0; n < blocks; ++n) {
        const std::size_t b = reverse ? blocks - 1 - n : n;
        const std::int64_t begin = cuts[b], count = cuts[b + 1] - cuts[b];
        Tensor<Mp> block_out;
        AttentionSaved<Mp> block_saved;
        shardsim::attention_forward(q, q_pos, shardsim::slice_along(k, "kv", begin, count),
                                    shardsim::slice_along(v, "kv", begin, count),
                                    position_range(begin, count), params, block_out, block_saved);
        shardsim::attention_merge(out, lse, block_out, block_saved.lse);
      }
      INFO("blocks " << blocks << (reverse ? " reversed" : ""));
      CHECK(normwise_gap(out, dense) <= 0x1p-241);
      CHECK(normwise_gap(lse, dense_saved.lse) <= 0x1p-241);
    }
  }
}

TEST_CASE("attention backward matches central differences in mp256", "[attention][mp]") {
  // L = sum(out * g). Central differences with h = 2^-60 have truncation error O(h^2) ~ 2^-120
  // and rounding error ~ 2^-257 / h ~ 2^-197 (relative to |L| ~ 10): far below the 2^-100
  // relative tolerance, which any wrong term (O(1) relative) misses by 30 orders of magnitude.
  shardsim::set_mp_precision(256);
  const Tensor<Mp> q = seeded_normal<Mp>(head_shape(1, "seq", 3, 2, 4), 21);
  const Tensor<Mp> k = seeded_normal<Mp>(head_shape(1, "kv", 5, 2, 4), 22);
  const Tensor<Mp> v = seeded_normal<Mp>(head_shape(1, "kv", 5, 2, 4), 23);
  const Tensor<Mp> g = seeded_normal<Mp>(q.shape(), 24);
  const std::vector<std::int64_t> q_pos{3, 4, 5};
  const std::vector<std::int64_t> k_pos{1, 2, 3, 4, 5};
  AttentionParams params;
  params.window = 3;
  auto loss = [&](const Tensor<Mp>& qq, const Tensor<Mp>& kk, const Tensor<Mp>& vv) {
    Tensor<Mp> out;
    AttentionSaved<Mp> saved;
    shardsim::attention_forward(qq, q_pos, kk, vv, k_pos, params, out, saved);
    Mp sum = 0;
    for (std::int64_t i = 0; i < out.numel(); ++i) sum += out[i] * g[i];
    return sum;
  };
  Tensor<Mp> out;
  AttentionSaved<Mp> saved;
  shardsim::attention_forward(q, q_pos, k, v, k_pos, params, out, saved);
  Tensor<Mp> dq, dk, dv;
  shardsim::attention_backward(g, q, q_pos, k, v, k_pos, saved, params, dq, dk, dv);
  const Mp h = ldexp(Mp(1), -60);
  auto check = [&](const Tensor<Mp>& base, const Tensor<Mp>& grad, int which) {
    for (std::int64_t i = 0; i < base.numel(); ++i) {
      Tensor<Mp> plus = base, minus = base;
      plus[i] += h;
      minus[i] -= h;
      Mp up, down;
      if (which == 0) {
        up = loss(plus, k, v);
        down = loss(minus, k, v);
      } else if (which == 1) {
        up = loss(q, plus, v);
        down = loss(q, minus, v);
      } else {
        up = loss(q, k, plus);
        down = loss(q, k, minus);
      }
      const Mp numeric = (up - down) / (2 * h);
      INFO("tensor " << which << " element " << i);
      CHECK(std::fabs(to_double(Mp(numeric - grad[i]))) <= 0x1p-100);
    }
  };
  check(q, dq, 0);
  check(k, dk, 1);
  check(v, dv, 2);

  // The block backward from the merged (out, lse), summed over blocks, is the same gradient.
  Tensor<Mp> bq(q.shape()), bk(k.shape()), bv(v.shape());
  for (const auto& [begin, count] : {std::pair<std::int64_t, std::int64_t>{0, 2}, {2, 3}}) {
    Tensor<Mp> part_k(shardsim::slice_along(k, "kv", begin, count).shape());
    Tensor<Mp> part_v(part_k.shape());
    shardsim::attention_block_backward(g, q, q_pos, shardsim::slice_along(k, "kv", begin, count),
                                       shardsim::slice_along(v, "kv", begin, count),
                                       position_range(1 + begin, count), out, saved.lse, params, bq,
                                       part_k, part_v);
    shardsim::copy_along(part_k, "kv", 0, bk, begin, count);
    shardsim::copy_along(part_v, "kv", 0, bv, begin, count);
  }
  CHECK(normwise_gap(bq, dq) <= 0x1p-241);
  CHECK(normwise_gap(bk, dk) <= 0x1p-241);
  CHECK(normwise_gap(bv, dv) <= 0x1p-241);
}

namespace {

// The sizes of the summation-order tests: head_dim 6 is not a multiple of 4 and 7 keys leave a
// tail block after the four-key blocks of row_scores.
constexpr std::int64_t kBatch = 2, kSeq = 5, kKv = 7, kHeads = 2, kDim = 6, kHidden = 5;

// The queries of the summation-order tests: x wq, (batch, seq, head, head_dim).
Tensor<double> order_test_queries() {
  const Tensor<double> x =
      seeded_normal<double>(Shape({{"batch", kBatch}, {"seq", kSeq}, {"hidden", kHidden}}), 31);
  const Tensor<double> w =
      seeded_normal<double>(Shape({{"hidden", kHidden}, {"head", kHeads}, {"head_dim", kDim}}), 32);
  Tensor<double> q;
  shardsim::project_heads(x, w, q);
  return q;
}

}  // namespace

TEST_CASE("projection kernels sum in the documented order, bitwise", "[attention]") {
  // The kernels reorganize their loops for speed (rows of outputs at once); every sum must still
  // be one accumulator in the order attention/project.hpp documents. The textbook loops below
  // are that specification, in f64, and must agree to the bit.
  const std::int64_t batch = kBatch, seq = kSeq, heads = kHeads, dim = kDim, hidden = kHidden;
  const Tensor<double> x =
      seeded_normal<double>(Shape({{"batch", batch}, {"seq", seq}, {"hidden", hidden}}), 31);
  const Tensor<double> w =
      seeded_normal<double>(Shape({{"hidden", hidden}, {"head", heads}, {"head_dim", dim}}), 32);
  const Tensor<double> wo =
      seeded_normal<double>(Shape({{"head", heads}, {"head_dim", dim}, {"hidden", hidden}}), 33);
  const Tensor<double> q = order_test_queries();
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t s = 0; s < seq; ++s) {
      for (std::int64_t n = 0; n < heads * dim; ++n) {
        double acc = 0;
        for (std::int64_t c = 0; c < hidden; ++c)
          acc += x[(b * seq + s) * hidden + c] * w[c * heads * dim + n];
        CHECK(q[(b * seq + s) * heads * dim + n] == acc);
      }
    }
  }
  Tensor<double> y;
  shardsim::project_out(q, wo, y);
  for (std::int64_t r = 0; r < batch * seq; ++r) {
    for (std::int64_t c = 0; c < hidden; ++c) {
      double acc = 0;
      for (std::int64_t n = 0; n < heads * dim; ++n)
        acc += q[r * heads * dim + n] * wo[n * hidden + c];
      CHECK(y[r * hidden + c] == acc);
    }
  }
}

TEST_CASE("attention_forward sums in the documented order, bitwise", "[attention]") {
  // The kernel computes four keys side by side; every sum must still be one accumulator in the
  // order attention.hpp documents. The textbook loops below are that specification, in f64, and
  // must agree to the bit.
  const std::int64_t batch = kBatch, seq = kSeq, kv = kKv, heads = kHeads, dim = kDim;
  const Tensor<double> q = order_test_queries();
  const Tensor<double> k = seeded_normal<double>(head_shape(batch, "kv", kv, heads, dim), 34);
  const Tensor<double> v = seeded_normal<double>(head_shape(batch, "kv", kv, heads, dim), 35);
  const std::vector<std::int64_t> q_pos = position_range(2, seq);  // 2..6
  const std::vector<std::int64_t> k_pos = position_range(0, kv);   // 0..6
  AttentionParams params;
  params.window = 6;  // query 6 sees keys 1..6: six keys, one block of four and a tail of two
  Tensor<double> out;
  AttentionSaved<double> saved;
  shardsim::attention_forward(q, q_pos, k, v, k_pos, params, out, saved);
  const double scale = 1.0 / std::sqrt(double(dim));
  auto at = [&](std::int64_t b, std::int64_t p, std::int64_t positions, std::int64_t h,
                std::int64_t d) { return ((b * positions + p) * heads + h) * dim + d; };
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t h = 0; h < heads; ++h) {
      for (std::int64_t i = 0; i < seq; ++i) {
        std::vector<std::int64_t> keys;
        std::vector<double> e;
        for (std::int64_t j = 0; j < kv; ++j) {
          const std::int64_t delta = q_pos[i] - k_pos[j];
          if (delta < 0 || delta >= 6) continue;
          double dot = 0;
          for (std::int64_t d = 0; d < dim; ++d)
            dot += q[at(b, i, seq, h, d)] * k[at(b, j, kv, h, d)];
          keys.push_back(j);
          e.push_back(dot * scale);
        }
        double m = -std::numeric_limits<double>::infinity();
        for (double s : e) m = std::max(m, s);
        double l = 0;
        for (double& s : e) {
          s = std::exp(s - m);
          l += s;
        }
        const std::int64_t row = (b * seq + i) * heads + h;
        CHECK(saved.max[row] == m);
        CHECK(saved.sum[row] == l);
        for (std::int64_t d = 0; d < dim; ++d) {
          double acc = 0;
          for (std::size_t n = 0; n < keys.size(); ++n) acc += e[n] * v[at(b, keys[n], kv, h, d)];
          INFO("b " << b << " h " << h << " i " << i << " d " << d);
          CHECK(out[at(b, i, seq, h, d)] == acc / l);
        }
      }
    }
  }
}
