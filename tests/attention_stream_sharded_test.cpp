// Streamed context-parallel attention with sequence-sharded queries (ops/attention/
// sharded_plan.hpp with the cache of sharded_cache.hpp): every chunk Shard(seq) over its own
// tokens, the cache on the tokens' owners (allgather, ring) or head groups (ulysses), trained
// chunk by chunk: the oracle agreement per mode, split and cp size (allgather and ulysses
// bitwise, ring within reordering noise), the cache's owners and values, the cache_raw_k fault,
// and the located refusal.
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "compare/compare.hpp"
#include "core/error.hpp"
#include "core/io.hpp"
#include "ops/attention/sharded_plan.hpp"
#include "ops/attention/stream.hpp"
#include "scenario/scenario.hpp"
#include "tensor_test_support.hpp"

using Catch::Matchers::Contains;
using shardsim::BoundaryResult;
using shardsim::RunReport;
using shardsim::Status;

namespace {

struct Setup {
  std::string mode = "allgather";
  std::string split = "chunk";
  int ranks = 2;
  std::string faults;   // "" or a TOML list body, e.g. "\"cache_raw_k\""
  int train_steps = 2;  // 0: forward only
};

// x [2, 13, 8] streamed in chunks 5, 2, 6 (uneven; 2 tokens leave ranks of a group of 3 or 4
// empty), Shard(seq, split) on a 1-D cp mesh; attention with 3 heads of 4 (no group of 2..4
// divides them), window 5 (the cache keeps 4 keys, spanning two chunks after chunk 2), an MSE
// loss against a target placed like x; 2 SGD steps (the update per chunk), or forward only.
std::string scenario_text(const Setup& s) {
  const std::string placement = "Shard(seq, " + s.split + ")";
  auto tensor = [&](const std::string& name, const std::string& axes, const std::string& shape,
                    const std::string& role, bool sharded) {
    return "[[tensors]]\nname = \"" + name + "\"\nrole = \"" + role + "\"\naxes = " + axes +
           "\nshape = " + shape + "\ninit = { dist = \"uniform\", low = -0.5, high = 0.5 }\n" +
           (sharded ? "placement = \"" + placement + "\"\n" : "");
  };
  const std::string proj = "[\"hidden\", \"head\", \"head_dim\"]";
  return "name = \"t\"\nseed = 9\n" +
         (s.train_steps == 0
              ? std::string()
              : "train_steps = " + std::to_string(s.train_steps) + "\nlearning_rate = 0.1\n") +
         (s.faults.empty() ? "" : "faults = [" + s.faults + "]\n") +
         "[mesh]\nranks = " + std::to_string(s.ranks) +
         "\n[stream]\naxis = \"seq\"\nchunks = [5, 2, 6]\n[tolerance]\nf32 = 1e-4\n" +
         tensor("x", "[\"batch\", \"seq\", \"hidden\"]", "[2, 13, 8]", "input", true) +
         tensor("target", "[\"batch\", \"seq\", \"hidden\"]", "[2, 13, 8]", "target", true) +
         tensor("wq", proj, "[8, 3, 4]", "parameter", false) +
         tensor("wk", proj, "[8, 3, 4]", "parameter", false) +
         tensor("wv", proj, "[8, 3, 4]", "parameter", false) +
         tensor("wo", "[\"head\", \"head_dim\", \"hidden\"]", "[3, 4, 8]", "parameter", false) +
         "[[steps]]\nop = \"sliding_window_attention\"\ninput = \"x\"\nwq = \"wq\"\nwk = "
         "\"wk\"\nwv = \"wv\"\nwo = \"wo\"\noutput = \"y\"\nn_head = 3\nhead_dim = 4\nwindow = "
         "5\ncp_mode = \"" +
         s.mode +
         "\"\n[[steps]]\nop = \"mse_loss\"\ninput = \"y\"\ntarget = \"target\"\noutput = "
         "\"loss\"\n";
}

RunReport run(const Setup& s, const std::string& precision) {
  return shardsim::evaluate(shardsim::parse_scenario(scenario_text(s), "t.toml"),
                            shardsim::parse_precision(precision));
}

// Every boundary that records `tensor` (in training step `step`, or in every step when 0).
std::vector<const BoundaryResult*> all(const RunReport& report, const std::string& tensor,
                                       int step = 0) {
  std::vector<const BoundaryResult*> out;
  for (const BoundaryResult& b : report.boundaries) {
    if (b.entry.tensor == tensor && (step == 0 || b.entry.step == step)) out.push_back(&b);
  }
  return out;
}

}  // namespace

TEST_CASE("streamed sharded queries: allgather and ulysses equal the oracle bitwise",
          "[attention_stream_sharded]") {
  // Each rank's queries (allgather) or head group (ulysses) run the oracle's arithmetic in the
  // oracle's order on the cache ++ chunk keys moved by global position, so forward, every
  // boundary of every chunk, the cache included, is bitwise (invariant 5). Trained, chunk 1 is
  // bitwise too, ulysses' attention backward included; later chunks start from weights updated
  // with gradients summed over the ranks' rows (a regrouped sum), so the run passes within
  // tolerance like every sharded training run.
  for (const std::string mode : {"allgather", "ulysses"}) {
    for (const std::string split : {"chunk", "zigzag"}) {
      for (int ranks = 1; ranks <= 4; ++ranks) {
        for (const std::string precision : {"f32", "f64"}) {
          INFO(mode << ", " << split << ", " << ranks << " ranks, " << precision);
          const RunReport forward = run({mode, split, ranks, "", 0}, precision);
          CHECK(forward.pass);
          std::vector<std::string> exact{"y.q_rot",   "y.k_shard", "y.v_shard", "y.cache_k",
                                         "y.cache_v", "y.lse",     "y.attn",    "y"};
          if (mode == "allgather") exact.insert(exact.end(), {"y.k_new", "y.k_all", "y.v_all"});
          if (mode == "ulysses") exact.insert(exact.end(), {"y.k_heads", "y.v_heads"});
          for (const std::string& tensor : exact) {
            INFO(tensor);
            const std::vector<const BoundaryResult*> found = all(forward, tensor);
            // the cache and k_new are read from chunk 2 on: 2 chunks; the rest all 3
            const bool from_chunk_2 = tensor.starts_with("y.cache") || tensor == "y.k_new";
            CHECK(found.size() == (from_chunk_2 ? 2u : 3u));
            for (const BoundaryResult* b : found) CHECK(b->status == Status::exact);
          }
          const RunReport trained = run({mode, split, ranks}, precision);
          CHECK(trained.pass);
          if (mode != "ulysses") continue;
          for (const std::string tensor :
               {"grad(y.q_rot)", "grad(y.k_shard)", "grad(y.v_shard)", "grad(x)"}) {
            INFO(tensor);
            const std::vector<const BoundaryResult*> found = all(trained, tensor, 1);
            REQUIRE(found.size() == 3u);
            CHECK(found.front()->status == Status::exact);  // chunk 1
          }
        }
      }
    }
  }
}

TEST_CASE("streamed sharded queries: ring differs from the oracle by reordering only",
          "[attention_stream_sharded]") {
  // The log-sum-exp merges of the blocks (a rank's cache ++ its chunk keys) and the dK/dV sums
  // travelling the ring reorder the dense sums: at mp256 a reordering of sums of a few dozen
  // terms of magnitude <= ~10 moves a result by a few ulps of 2^-256 relative; 2^-230 leaves
  // 2^26 of headroom and is ~2^-180 below a semantic bug (a wrong position or a missed cached
  // key gives relative gaps >= 1e-3 here).
  const double bound = std::ldexp(1.0, -230);
  for (const std::string split : {"chunk", "zigzag"}) {
    for (int ranks = 1; ranks <= 4; ++ranks) {
      INFO(split << ", " << ranks << " ranks");
      CHECK(run({"ring", split, ranks}, "f32").pass);
      const RunReport mp = run({"ring", split, ranks}, "mp256");
      CHECK(mp.pass);
      for (const std::string tensor : {"y.lse", "y.attn", "y", "grad(y.q_rot)", "grad(y.k_shard)",
                                       "grad(y.v_shard)", "grad(x)", "grad(wq)", "grad(wk)"}) {
        INFO(tensor);
        const std::vector<const BoundaryResult*> found = all(mp, tensor);
        CHECK(found.size() >= 6u);  // 2 steps x 3 chunks (the weights' also at their all_reduce)
        for (const BoundaryResult* b : found) {
          CHECK(b->status != Status::fail);
          CHECK(b->max_rel.to_double() <= bound);
        }
      }
      CHECK(all(mp, "y.cache_k").empty());  // ring never assembles the cache
    }
  }
}

TEST_CASE("the streamed cache stays on the tokens' owners, rotated at their positions",
          "[attention_stream_sharded]") {
  // x [1, 8, 4] in chunks 5 and 3, Shard(seq, zigzag) over 2 ranks, window 5 (the cache keeps
  // the 4 latest keys). Chunk 1 (positions 0..4): 5 tokens in 4 pieces of ceil(5/4) = 2, [0:2)
  // [2:4) [4:5) [5:5); rank 0 holds pieces 0, 3 = positions 0, 1; rank 1 pieces 1, 2 = 2, 3, 4.
  // Kept: 1..4 -> rank 0 {1}, rank 1 {2, 3, 4}. Chunk 2 (positions 5..7): pieces of 1, [0:1)
  // [1:2) [2:3) [3:3); rank 0 = {5}, rank 1 = {6, 7}. Kept: 4..7 -> rank 0 {5}, rank 1 {4, 6, 7}.
  // Each kept row is the oracle's rotated key at that position, bit for bit.
  using T = double;
  const shardsim::Shape x_shape({{"batch", 1}, {"seq", 8}, {"hidden", 4}});
  const shardsim::Shape in_shape({{"hidden", 4}, {"head", 1}, {"head_dim", 2}});
  const shardsim::Shape out_shape({{"head", 1}, {"head_dim", 2}, {"hidden", 4}});
  const auto x = tensor_test::seeded_normal<T>(x_shape, 1, 1.0);
  const auto wq = tensor_test::seeded_normal<T>(in_shape, 2, 0.5);
  const auto wk = tensor_test::seeded_normal<T>(in_shape, 3, 0.5);
  const auto wv = tensor_test::seeded_normal<T>(in_shape, 4, 0.5);
  const auto wo = tensor_test::seeded_normal<T>(out_shape, 5, 0.5);
  shardsim::World<T> world(2, shardsim::ReduceOrder::rank, shardsim::Schedule{});
  const shardsim::Placement replicate = shardsim::Placement::replicate();
  const shardsim::Placement zigzag =
      shardsim::Placement::shard("seq", shardsim::SplitPolicy::zigzag);
  shardsim::CpAttentionConfig config;
  config.name = "y";
  config.params.attention.window = 5;
  shardsim::KvCache<T> dense_cache;
  shardsim::CpShardedCache<T> cache;
  const std::vector<std::vector<std::vector<std::int64_t>>> owners{{{1}, {2, 3, 4}},
                                                                   {{5}, {4, 6, 7}}};
  std::int64_t begin = 0;
  for (std::size_t chunk = 0; chunk < 2; ++chunk) {
    const std::int64_t t = chunk == 0 ? 5 : 3;
    const auto xc = shardsim::slice_along(x, "seq", begin, t);
    begin += t;
    shardsim::StreamAttentionActivations<T> acts;
    shardsim::stream_attention_forward(xc, wq, wk, wv, wo, config.params, dense_cache, acts);
    shardsim::CpShardedSaved<T> saved;
    shardsim::cp_sharded_attention_forward(world, shardsim::distribute<T>("x", xc, zigzag, 2),
                                           shardsim::distribute<T>("wq", wq, replicate, 2),
                                           shardsim::distribute<T>("wk", wk, replicate, 2),
                                           shardsim::distribute<T>("wv", wv, replicate, 2),
                                           shardsim::distribute<T>("wo", wo, replicate, 2), config,
                                           cache, saved);
    INFO("chunk " << chunk + 1);
    CHECK(cache.next_position == dense_cache.next_position);
    CHECK(cache.length == dense_cache.length());
    REQUIRE(cache.coord_positions == owners[chunk]);
    const std::int64_t tail = dense_cache.next_position - dense_cache.length();
    for (int r = 0; r < 2; ++r) {
      const auto& mine = owners[chunk][static_cast<std::size_t>(r)];
      for (std::size_t i = 0; i < mine.size(); ++i) {
        const auto at = static_cast<std::int64_t>(i);
        CHECK(shardsim::slice_along(cache.k[static_cast<std::size_t>(r)], "kv", at, 1).values() ==
              shardsim::slice_along(dense_cache.k, "kv", mine[i] - tail, 1).values());
        CHECK(shardsim::slice_along(cache.v[static_cast<std::size_t>(r)], "kv", at, 1).values() ==
              shardsim::slice_along(dense_cache.v, "kv", mine[i] - tail, 1).values());
      }
    }
  }
}

TEST_CASE("cache_raw_k with sharded queries diverges at chunk 2, never chunk 1",
          "[attention_stream_sharded]") {
  // The owners cache their raw keys: chunk 1 reads no cache and is exact everywhere; chunk 2's
  // first cache read differs. allgather gathers the cache first (y.cache_k); ring carries it in
  // its blocks, so the first boundary that reads it is the merged y.lse.
  for (const std::string mode : {"allgather", "ring"}) {
    for (const std::string split : {"chunk", "zigzag"}) {
      INFO(mode << ", " << split);
      const RunReport report = run({mode, split, 2, "\"cache_raw_k\""}, "f64");
      REQUIRE_FALSE(report.pass);
      REQUIRE(report.first_divergence.has_value());
      CHECK(report.first_divergence->step == 1);
      CHECK(report.first_divergence->chunk == 2);
      CHECK(report.first_divergence->tensor == (mode == "allgather" ? "y.cache_k" : "y.lse"));
      for (const BoundaryResult& b : report.boundaries) {
        if (b.entry.step == 1 && b.entry.chunk == 1) CHECK(b.status != Status::fail);
      }
    }
  }
}

TEST_CASE("cache_raw_k with sharded ulysses queries is a located error",
          "[attention_stream_sharded]") {
  const std::string text = scenario_text({"ulysses", "zigzag", 2, "\"cache_raw_k\""});
  CHECK_THROWS_AS(shardsim::parse_scenario(text, "t.toml"), shardsim::InputError);
  CHECK_THROWS_WITH(shardsim::parse_scenario(text, "t.toml"),
                    Contains("t.toml:") && Contains("steps[0].cp_mode") &&
                        Contains("needs cp_mode = \"allgather\" or \"ring\""));
}

TEST_CASE("streamed sharded queries on a dp x cp x tp mesh, every mode",
          "[attention_stream_sharded]") {
  // mesh_cp_tp_zigzag_training.toml (attention on cp with zigzag queries, then an MLP on tp)
  // with a dp dim that shards the batch and the sequence streamed in chunks 5, 3, 4: the cache
  // lives per (dp, tp) group, on its cp members; 2 SGD steps pass against the oracle.
  std::string text = shardsim::read_file(std::string(SHARDSIM_SOURCE_DIR) +
                                         "/scenarios/mesh_cp_tp_zigzag_training.toml");
  auto replace_all = [&](const std::string& from, const std::string& to) {
    for (std::size_t at = text.find(from); at != std::string::npos; at = text.find(from, at)) {
      text.replace(at, from.size(), to);
      at += to.size();
    }
  };
  replace_all("dims = { cp = 2, tp = 2 }",
              "dims = { dp = 2, cp = 2, tp = 2 }\n\n[stream]\naxis = \"seq\"\nchunks = [5, 3, 4]");
  replace_all("placement = { cp = \"Shard(seq, zigzag)\" }",
              "placement = { dp = \"Shard(batch)\", cp = \"Shard(seq, zigzag)\" }");
  for (const std::string mode : {"ring", "allgather", "ulysses"}) {
    INFO(mode);
    std::string variant = text;
    const std::string ring = "cp_mode = \"ring\"";
    variant.replace(variant.find(ring), ring.size(), "cp_mode = \"" + mode + "\"");
    const RunReport report = shardsim::evaluate(shardsim::parse_scenario(variant, "mesh.toml"),
                                                shardsim::parse_precision("f64"));
    CHECK(report.pass);
    // read by chunks 2 and 3 of both steps (ring never assembles it)
    CHECK(all(report, "attn.cache_k").size() == (mode == "ring" ? 0u : 4u));
  }
}
