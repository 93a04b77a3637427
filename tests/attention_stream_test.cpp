// Tests for the streamed dense oracle of ops/attention/stream.hpp: the cache convention (K after
// RoPE, window - 1 keys, positions carried into the next chunk) and the detached-cache gradient of
// a chunk against central differences in mp.
#include <catch2/catch.hpp>
#include <cmath>
#include <optional>
#include <utility>
#include <vector>

#include "core/mp.hpp"
#include "ops/attention/rope.hpp"
#include "ops/attention/stream.hpp"
#include "tensor_test_support.hpp"

using shardsim::Mp;
using shardsim::Shape;
using shardsim::Tensor;

using tensor_test::seeded_normal;

TEST_CASE("the streamed oracle caches the last window - 1 keys after RoPE", "[streaming]") {
  const Tensor<double> x =
      seeded_normal<double>(Shape({{"batch", 1}, {"seq", 8}, {"hidden", 4}}), 1, 1);
  const Shape w_shape({{"hidden", 4}, {"head", 1}, {"head_dim", 2}});
  const Tensor<double> wq = seeded_normal<double>(w_shape, 2, 1),
                       wk = seeded_normal<double>(w_shape, 3, 1);
  const Tensor<double> wv = seeded_normal<double>(w_shape, 4, 1);
  const Tensor<double> wo =
      seeded_normal<double>(Shape({{"head", 1}, {"head_dim", 2}, {"hidden", 4}}), 5, 1);
  for (const auto& [window, keep] :
       {std::pair<std::optional<std::int64_t>, std::int64_t>{4, 3}, {1, 0}, {std::nullopt, 5}}) {
    shardsim::StreamAttentionParams params;
    params.attention.window = window;
    shardsim::KvCache<double> cache;
    shardsim::StreamAttentionActivations<double> acts;
    shardsim::stream_attention_forward(shardsim::slice_along(x, "seq", 0, 5), wq, wk, wv, wo,
                                       params, cache, acts);
    INFO("keep " << keep);
    CHECK(cache.length() == keep);
    CHECK(cache.next_position == 5);
    // K after RoPE: the tail of k_all, not of the raw keys.
    CHECK(cache.k.values() == shardsim::slice_along(acts.k_all, "kv", 5 - keep, keep).values());
    if (keep > 0)
      CHECK(cache.k.values() != shardsim::slice_along(acts.k_cat, "kv", 5 - keep, keep).values());
    // The next chunk reads it as keys at positions 5 - keep .. 4.
    shardsim::stream_attention_forward(shardsim::slice_along(x, "seq", 5, 3), wq, wk, wv, wo,
                                       params, cache, acts);
    CHECK(acts.first_position == 5);
    CHECK(acts.cache_length == keep);
    CHECK(acts.k_all.shape().extent("kv") == keep + 3);
  }
}

TEST_CASE("streamed backward is the detached-cache gradient (central differences, mp256)",
          "[streaming][mp]") {
  // Chunk 1 fills the cache; chunk 2's loss L = sum(y * g) is differentiated with the cache held
  // fixed (detached). h = 2^-60: truncation O(h^2) ~ 2^-120, rounding ~ 2^-257 / h ~ 2^-197,
  // both far below the 2^-100 tolerance; a missing or extra path is O(1).
  shardsim::set_mp_precision(256);
  const Tensor<Mp> x = seeded_normal<Mp>(Shape({{"batch", 1}, {"seq", 7}, {"hidden", 3}}), 11, 1);
  const Shape w_shape({{"hidden", 3}, {"head", 2}, {"head_dim", 2}});
  std::vector<Tensor<Mp>> w = {
      seeded_normal<Mp>(w_shape, 12, 0.7), seeded_normal<Mp>(w_shape, 13, 0.7),
      seeded_normal<Mp>(w_shape, 14, 0.7),
      seeded_normal<Mp>(Shape({{"head", 2}, {"head_dim", 2}, {"hidden", 3}}), 15, 0.7)};
  shardsim::StreamAttentionParams params;
  params.attention.window = 3;
  params.rope.convention = shardsim::RopeConvention::interleaved;
  params.rope.theta = 50;
  shardsim::KvCache<Mp> after_chunk1;
  shardsim::StreamAttentionActivations<Mp> acts;
  shardsim::stream_attention_forward(shardsim::slice_along(x, "seq", 0, 4), w[0], w[1], w[2], w[3],
                                     params, after_chunk1, acts);
  Tensor<Mp> x2 = shardsim::slice_along(x, "seq", 4, 3);
  const Tensor<Mp> g = seeded_normal<Mp>(Shape({{"batch", 1}, {"seq", 3}, {"hidden", 3}}), 16, 1);
  auto loss = [&](const Tensor<Mp>& xx, const std::vector<Tensor<Mp>>& ww) {
    shardsim::KvCache<Mp> cache = after_chunk1;  // the detached cache, never perturbed
    shardsim::StreamAttentionActivations<Mp> a;
    shardsim::stream_attention_forward(xx, ww[0], ww[1], ww[2], ww[3], params, cache, a);
    Mp sum = 0;
    for (std::int64_t i = 0; i < a.y.numel(); ++i) sum += a.y[i] * g[i];
    return sum;
  };
  shardsim::KvCache<Mp> cache = after_chunk1;
  shardsim::stream_attention_forward(x2, w[0], w[1], w[2], w[3], params, cache, acts);
  shardsim::StreamAttentionGrads<Mp> grads;
  std::vector<Tensor<Mp>> dw;
  for (const Tensor<Mp>& t : w) dw.emplace_back(t.shape());
  shardsim::stream_attention_backward(g, x2, w[0], w[1], w[2], w[3], acts, params, grads, dw[0],
                                      dw[1], dw[2], dw[3]);
  const Mp h = ldexp(Mp(1), -60);
  auto numeric = [&](Tensor<Mp>& t, std::int64_t i, auto eval) {
    const Mp saved = t[i];
    t[i] = saved + h;
    const Mp up = eval();
    t[i] = saved - h;
    const Mp down = eval();
    t[i] = saved;
    return Mp((up - down) / (2 * h));
  };
  for (std::int64_t i = 0; i < x2.numel(); ++i) {
    const Mp fd = numeric(x2, i, [&] { return loss(x2, w); });
    INFO("x element " << i);
    CHECK(std::fabs(shardsim::round_to_f64(Mp(fd - grads.x[i]))) <= 0x1p-100);
  }
  for (std::size_t p = 0; p < w.size(); ++p) {
    for (std::int64_t i = 0; i < w[p].numel(); ++i) {
      const Mp fd = numeric(w[p], i, [&] { return loss(x2, w); });
      INFO("weight " << p << " element " << i);
      CHECK(std::fabs(shardsim::round_to_f64(Mp(fd - dw[p][i]))) <= 0x1p-100);
    }
  }
}
