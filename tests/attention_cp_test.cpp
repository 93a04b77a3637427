// Tests for the context-parallel attention plans (ops/attention/plan.hpp) against the dense
// streaming oracle (ops/attention/stream.hpp), chunk by chunk with the cache carried:
//   - allgather and ulysses equal the oracle bitwise (==) in f32 and f64, forward, cache and
//     backward, for cp_size 1..5, uneven and short KV axes, uneven head groups;
//   - ring differs by reordering only: within 2^(16 - bits) at f32/f64 and 2^-241 at mp256, with
//     fully masked blocks merging without NaN;
//   - the KV shards follow torch.chunk, and results do not depend on the rank schedule;
//   - the world's ring send/recv moves blocks one rank forward and checks its rendezvous.
#include <catch2/catch.hpp>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "core/mp.hpp"
#include "ops/attention/plan.hpp"
#include "ops/attention/stream.hpp"
#include "core/rng.hpp"
#include "tensor_test_support.hpp"

using shardsim::CpMode;
using shardsim::DistTensor;
using shardsim::Mp;
using shardsim::Placement;
using shardsim::RopeConvention;
using shardsim::Shape;
using shardsim::Tensor;

using tensor_test::seeded_normal;

namespace {

template <typename T>
double to_double(const T& v) {
  if constexpr (std::is_same_v<T, Mp>) {
    return shardsim::round_to_f64(v);
  } else {
    return static_cast<double>(v);
  }
}

// The global tensor a DistTensor holds (Replicate: rank 0's copy, checked equal on every rank).
template <typename T>
Tensor<T> global_of(const DistTensor<T>& d) {
  if (d.layout.on(0).is_replicate()) {
    for (int r = 1; r < d.ranks(); ++r) REQUIRE(d.local(r).values() == d.local(0).values());
    return d.local(0);
  }
  REQUIRE(d.layout.on(0).is_shard());
  Tensor<T> out(d.global);
  for (int r = 0; r < d.ranks(); ++r) {
    const shardsim::Slice slice = d.slice(r, d.layout.on(0).axis);
    shardsim::copy_along(d.local(r), d.layout.on(0).axis, 0, out, slice.begin, slice.valid());
  }
  return out;
}

// max |a - b| / max |b|; a NaN anywhere gives +inf.
template <typename T>
double normwise_gap(const Tensor<T>& a, const Tensor<T>& b) {
  double scale = 0, gap = 0;
  for (std::int64_t i = 0; i < b.numel(); ++i) {
    const double x = to_double(a[i]), y = to_double(b[i]);
    if (std::isnan(x) || std::isnan(y)) return INFINITY;
    scale = std::max(scale, std::fabs(y));
    gap = std::max(gap, std::fabs(x - y));
  }
  return scale == 0 ? gap : gap / scale;
}

struct Case {
  int ranks = 2;
  CpMode mode = CpMode::allgather;
  std::optional<std::int64_t> window = 4;
  RopeConvention rope = RopeConvention::rotate_half;
  std::vector<std::int64_t> chunks{5, 3, 6};
  std::int64_t heads = 2;
  shardsim::Schedule schedule{};

  std::string str() const {
    std::string out = "ranks " + std::to_string(ranks) + ", " +
                      std::string(shardsim::cp_mode_name(mode)) + ", window " +
                      (window ? std::to_string(*window) : "none") + ", heads " +
                      std::to_string(heads) + ", " +
                      std::string(shardsim::rope_convention_name(rope)) + ", chunks";
    for (std::int64_t c : chunks) out += " " + std::to_string(c);
    return out;
  }
};

// Streams `c.chunks` through the dense oracle and the plan, forward and backward, and hands each
// chunk's pairs (name, dense, sharded global) to `visit`.
template <typename T, typename Visit>
void stream(const Case& c, Visit visit) {
  const std::int64_t batch = 2, hidden = 6, head_dim = 4;
  std::int64_t total = 0;
  for (std::int64_t n : c.chunks) total += n;
  const Tensor<T> x =
      seeded_normal<T>(Shape({{"batch", batch}, {"seq", total}, {"hidden", hidden}}), 1, 1);
  const Shape in_shape({{"hidden", hidden}, {"head", c.heads}, {"head_dim", head_dim}});
  const Shape out_shape({{"head", c.heads}, {"head_dim", head_dim}, {"hidden", hidden}});
  const Tensor<T> wq = seeded_normal<T>(in_shape, 2, 0.5), wk = seeded_normal<T>(in_shape, 3, 0.5);
  const Tensor<T> wv = seeded_normal<T>(in_shape, 4, 0.5), wo = seeded_normal<T>(out_shape, 5, 0.5);
  shardsim::World<T> world(c.ranks, shardsim::ReduceOrder::rank, c.schedule);
  const Placement replicate = Placement::replicate();
  auto dist = [&](const char* name, const Tensor<T>& t) {
    return shardsim::distribute<T>(name, t, replicate, c.ranks);
  };
  const DistTensor<T> swq = dist("wq", wq), swk = dist("wk", wk), swv = dist("wv", wv);
  const DistTensor<T> swo = dist("wo", wo);
  shardsim::CpAttentionConfig config;
  config.name = "y";
  config.mode = c.mode;
  config.params.attention.window = c.window;
  config.params.rope.convention = c.rope;
  config.params.rope.theta = 100;  // fast planes: a position error shows at every pair
  shardsim::KvCache<T> dense_cache;
  shardsim::CpKvCache<T> cache;
  std::int64_t begin = 0;
  for (std::size_t chunk = 0; chunk < c.chunks.size(); ++chunk) {
    const std::int64_t t = c.chunks[chunk];
    const Tensor<T> xc = shardsim::slice_along(x, "seq", begin, t);
    begin += t;
    shardsim::StreamAttentionActivations<T> acts;
    shardsim::stream_attention_forward(xc, wq, wk, wv, wo, config.params, dense_cache, acts);
    shardsim::CpAttentionSaved<T> saved;
    const DistTensor<T> sx = dist("x", xc);
    const DistTensor<T> y =
        shardsim::cp_attention_forward(world, sx, swq, swk, swv, swo, config, cache, saved);
    visit(chunk, "y", acts.y, global_of(y));
    visit(chunk, "attn", acts.attn, global_of(saved.attn));
    visit(chunk, "cache_k", dense_cache.k, global_of(cache.k));
    visit(chunk, "cache_v", dense_cache.v, global_of(cache.v));
    CHECK(cache.next_position == dense_cache.next_position);

    const Tensor<T> dy = seeded_normal<T>(acts.y.shape(), 100 + chunk, 1);
    shardsim::StreamAttentionGrads<T> g;
    Tensor<T> dwq(wq.shape()), dwk(wk.shape()), dwv(wv.shape()), dwo(wo.shape());
    shardsim::stream_attention_backward(dy, xc, wq, wk, wv, wo, acts, config.params, g, dwq, dwk,
                                        dwv, dwo);
    const shardsim::CpAttentionGrads<T> sg = shardsim::cp_attention_backward(
        world, dist("grad(y)", dy), sx, swq, swk, swv, swo, config, saved);
    visit(chunk, "grad(x)", g.x, global_of(sg.x));
    visit(chunk, "grad(wq)", dwq, global_of(sg.wq));
    visit(chunk, "grad(wk)", dwk, global_of(sg.wk));
    visit(chunk, "grad(wv)", dwv, global_of(sg.wv));
    visit(chunk, "grad(wo)", dwo, global_of(sg.wo));
  }
}

std::vector<Case> exact_cases() {
  std::vector<Case> cases;
  for (CpMode mode : {CpMode::allgather, CpMode::ulysses}) {
    for (int ranks = 1; ranks <= 5; ++ranks) {
      for (std::optional<std::int64_t> window :
           {std::optional<std::int64_t>(4), std::optional<std::int64_t>(),
            std::optional<std::int64_t>(1)}) {
        Case c;
        c.ranks = ranks;
        c.mode = mode;
        c.window = window;
        c.rope = ranks % 2 ? RopeConvention::rotate_half : RopeConvention::interleaved;
        c.heads = ranks == 4 ? 3 : 2;  // 3 heads over 4 ranks: head groups 1, 1, 1, 0
        cases.push_back(c);
      }
      Case short_axis;  // KV axes of 1, 3, 2 keys: fewer non-empty shards than ranks
      short_axis.ranks = ranks;
      short_axis.mode = mode;
      short_axis.window = 2;
      short_axis.chunks = {1, 2, 1};
      short_axis.heads = 3;
      cases.push_back(short_axis);
    }
  }
  return cases;
}

}  // namespace

TEMPLATE_TEST_CASE("allgather and ulysses plans equal the dense oracle bitwise", "[attention_cp]",
                   float, double) {
  for (const Case& c : exact_cases()) {
    INFO(c.str());
    stream<TestType>(c, [&](std::size_t chunk, const std::string& name,
                            const Tensor<TestType>& dense, const Tensor<TestType>& sharded) {
      INFO("chunk " << chunk + 1 << " " << name);
      REQUIRE(dense.shape() == sharded.shape());
      CHECK(sharded.values() == dense.values());
    });
  }
}

TEMPLATE_TEST_CASE("ring attention differs from dense by reordering only", "[attention_cp]", float,
                   double, Mp) {
  shardsim::set_mp_precision(256);
  // f32/f64: the documented default tolerance 2^(16 - bits) (2^-8, 2^-37). mp256 (257 bits):
  // 2^-241. A semantic error (a lost block, a wrong merge weight) is O(1) relative.
  const double rtol = std::is_same_v<TestType, float>    ? 0x1p-8
                      : std::is_same_v<TestType, double> ? 0x1p-37
                                                         : 0x1p-241;
  for (int ranks = 1; ranks <= 5; ++ranks) {
    for (std::optional<std::int64_t> window :
         {std::optional<std::int64_t>(4), std::optional<std::int64_t>(2),
          std::optional<std::int64_t>()}) {
      Case c;
      c.ranks = ranks;
      c.mode = CpMode::ring;
      c.window = window;  // window 2 over up to 5 ranks: many blocks are fully masked
      c.rope = RopeConvention::interleaved;
      INFO(c.str());
      stream<TestType>(c, [&](std::size_t chunk, const std::string& name,
                              const Tensor<TestType>& dense, const Tensor<TestType>& sharded) {
        INFO("chunk " << chunk + 1 << " " << name);
        REQUIRE(dense.shape() == sharded.shape());
        CHECK(normwise_gap(sharded, dense) <= rtol);
      });
    }
  }
}

TEMPLATE_TEST_CASE("one-rank ring is the dense forward bit for bit", "[attention_cp]", float,
                   double) {
  // With one block the merge takes the block's result unchanged (running lse starts at -inf).
  Case c;
  c.ranks = 1;
  c.mode = CpMode::ring;
  stream<TestType>(c, [&](std::size_t chunk, const std::string& name, const Tensor<TestType>& dense,
                          const Tensor<TestType>& sharded) {
    INFO("chunk " << chunk + 1 << " " << name);
    if (!name.starts_with("grad(")) CHECK(sharded.values() == dense.values());
  });
}

TEST_CASE("results do not depend on the rank schedule", "[attention_cp]") {
  for (CpMode mode : {CpMode::allgather, CpMode::ring, CpMode::ulysses}) {
    std::vector<std::vector<double>> runs;
    for (const char* schedule : {"rank", "reverse", "shuffle:7"}) {
      Case c;
      c.ranks = 3;
      c.mode = mode;
      c.schedule = shardsim::parse_schedule(schedule);
      std::vector<double> values;
      stream<double>(c, [&](std::size_t, const std::string&, const Tensor<double>&,
                            const Tensor<double>& sharded) {
        values.insert(values.end(), sharded.values().begin(), sharded.values().end());
      });
      runs.push_back(values);
    }
    INFO("mode " << shardsim::cp_mode_name(mode));
    CHECK(runs[1] == runs[0]);
    CHECK(runs[2] == runs[0]);
  }
}

TEST_CASE("the KV axis is split with torch.chunk semantics", "[attention_cp]") {
  // cache ++ chunk of 5 keys over 4 ranks: c = 2 -> 2, 2, 1, 0; 1 key over 4 ranks -> 1, 0, 0, 0.
  for (const auto& [chunk, expected] :
       {std::pair<std::int64_t, std::vector<std::int64_t>>{5, {2, 2, 1, 0}}, {1, {1, 0, 0, 0}}}) {
    shardsim::World<double> world(4, shardsim::ReduceOrder::rank, {});
    const Shape x_shape({{"batch", 1}, {"seq", chunk}, {"hidden", 2}});
    const Shape w_shape({{"hidden", 2}, {"head", 1}, {"head_dim", 2}});
    auto dist = [&](const char* name, const Shape& shape) {
      return shardsim::distribute<double>(name, seeded_normal<double>(shape, 9, 1),
                                          Placement::replicate(), 4);
    };
    shardsim::CpAttentionConfig config;
    config.name = "y";
    config.params.attention.window = 4;
    shardsim::CpKvCache<double> cache;
    shardsim::CpAttentionSaved<double> saved;
    shardsim::cp_attention_forward(
        world, dist("x", x_shape), dist("wq", w_shape), dist("wk", w_shape), dist("wv", w_shape),
        dist("wo", Shape({{"head", 1}, {"head_dim", 2}, {"hidden", 2}})), config, cache, saved);
    REQUIRE(saved.k_shard.layout.on(0) == Placement::shard("kv"));
    for (int r = 0; r < 4; ++r) {
      INFO("rank " << r);
      CHECK(saved.k_shard.local(r).shape().extent("kv") == expected[static_cast<std::size_t>(r)]);
    }
    // The cache keeps min(window - 1, keys) = min(3, chunk) keys, after RoPE.
    CHECK(cache.length() == std::min<std::int64_t>(3, chunk));
  }
}

TEST_CASE("ring send/recv moves every block one rank forward", "[attention_cp][world]") {
  shardsim::World<double> world(3, shardsim::ReduceOrder::rank, {});
  std::vector<Tensor<double>> blocks;
  for (int r = 0; r < 3; ++r) {
    // Uneven blocks travel as they are: rank r sends r + 1 keys valued r.
    Tensor<double> block(shardsim::head_shape(1, "kv", r + 1, 1, 2));
    for (double& v : block.values()) v = r;
    blocks.push_back(block);
  }
  const std::vector<Tensor<double>> received = world.ring_send_recv(blocks);
  for (int r = 0; r < 3; ++r) {
    const int from = (r + 2) % 3;
    INFO("rank " << r);
    CHECK(received[static_cast<std::size_t>(r)].shape().extent("kv") == from + 1);
    CHECK(received[static_cast<std::size_t>(r)][0] == from);
  }
  blocks[2] = Tensor<double>(Shape({{"batch", 1}, {"seq", 2}, {"head", 1}, {"head_dim", 2}}));
  CHECK_THROWS_WITH(world.ring_send_recv(blocks), Catch::Contains("ranks 2"));
  blocks.pop_back();
  CHECK_THROWS_AS(world.ring_send_recv(blocks), shardsim::RendezvousError);
}
