// Context-parallel attention with sequence-sharded queries (ops/attention/sharded_plan.hpp) in
// every cp_mode and split, trained: the boundary contract per mode (allgather and ulysses
// bitwise, ring within reordering noise), the zigzag layout at the attention's boundaries, the
// mask_zigzag_contiguous fault, and the located refusals.
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <utility>

#include "compare/compare.hpp"
#include "core/error.hpp"
#include "scenario/scenario.hpp"

using Catch::Matchers::Contains;
using shardsim::BoundaryResult;
using shardsim::RunReport;
using shardsim::Status;

namespace {

struct Setup {
  std::string mode = "allgather";
  std::string placement = "Shard(seq)";
  int ranks = 2;
  int seq = 13;
  int heads = 3;
  std::string faults;  // "" or a TOML list body, e.g. "\"mask_zigzag_contiguous\""
};

// x [2, seq, 8] placed as `placement` on a 1-D cp mesh, attention (window 5, head_dim 4) and an
// MSE loss against a target placed like x, 2 SGD steps.
std::string scenario_text(const Setup& s) {
  const std::string heads = std::to_string(s.heads);
  const std::string seq = std::to_string(s.seq);
  auto tensor = [&](const std::string& name, const std::string& axes, const std::string& shape,
                    const std::string& role, const std::string& placement) {
    return "[[tensors]]\nname = \"" + name + "\"\nrole = \"" + role + "\"\naxes = " + axes +
           "\nshape = " + shape +
           "\ninit = { dist = \"uniform\", low = -0.5, high = 0.5 }\n" +
           (placement.empty() ? "" : "placement = \"" + placement + "\"\n");
  };
  return "name = \"t\"\nseed = 7\ntrain_steps = 2\nlearning_rate = 0.1\n" +
         (s.faults.empty() ? "" : "faults = [" + s.faults + "]\n") + "[mesh]\nranks = " +
         std::to_string(s.ranks) + "\n[tolerance]\nf32 = 1e-4\n" +
         tensor("x", "[\"batch\", \"seq\", \"hidden\"]", "[2, " + seq + ", 8]", "input",
                s.placement) +
         tensor("target", "[\"batch\", \"seq\", \"hidden\"]", "[2, " + seq + ", 8]", "target",
                s.placement) +
         tensor("wq", "[\"hidden\", \"head\", \"head_dim\"]", "[8, " + heads + ", 4]", "parameter",
                "") +
         tensor("wk", "[\"hidden\", \"head\", \"head_dim\"]", "[8, " + heads + ", 4]", "parameter",
                "") +
         tensor("wv", "[\"hidden\", \"head\", \"head_dim\"]", "[8, " + heads + ", 4]", "parameter",
                "") +
         tensor("wo", "[\"head\", \"head_dim\", \"hidden\"]", "[" + heads + ", 4, 8]", "parameter",
                "") +
         "[[steps]]\nop = \"sliding_window_attention\"\ninput = \"x\"\nwq = \"wq\"\nwk = "
         "\"wk\"\nwv = \"wv\"\nwo = \"wo\"\noutput = \"y\"\nn_head = " +
         heads + "\nhead_dim = 4\nwindow = 5\ncp_mode = \"" + s.mode +
         "\"\n[[steps]]\nop = \"mse_loss\"\ninput = \"y\"\ntarget = \"target\"\noutput = "
         "\"loss\"\n";
}

RunReport run(const Setup& s, const std::string& precision) {
  return shardsim::evaluate(shardsim::parse_scenario(scenario_text(s), "t.toml"),
                            shardsim::parse_precision(precision));
}

// The step-1 boundary that records `tensor`. REQUIRES: there is one.
const BoundaryResult& at(const RunReport& report, const std::string& tensor) {
  for (const BoundaryResult& b : report.boundaries) {
    if (b.entry.step == 1 && b.entry.tensor == tensor) return b;
  }
  FAIL("no step-1 boundary records " << tensor);
  return report.boundaries.front();
}

}  // namespace

TEST_CASE("sharded queries: allgather and ulysses equal the dense oracle bitwise, every split",
          "[attention_sharded]") {
  // Each rank's queries (allgather) or head group (ulysses) run the oracle's arithmetic in the
  // oracle's order on operands moved by global position, so the forward, and in ulysses the
  // attention backward, are bitwise (invariant 5). 13 tokens and 3 heads divide by no group of
  // 2..4: uneven and empty shards and head groups.
  for (const std::string mode : {"allgather", "ulysses"}) {
    for (const std::string split : {"chunk", "balanced", "zigzag"}) {
      for (int ranks = 1; ranks <= 4; ++ranks) {
        for (const std::string precision : {"f32", "f64"}) {
          const Setup s{mode, "Shard(seq, " + split + ")", ranks};
          INFO(mode << ", " << split << ", " << ranks << " ranks, " << precision);
          const RunReport report = run(s, precision);
          CHECK(report.pass);
          for (const std::string tensor : {"y.q_rot", "y.k_shard", "y.lse", "y.attn", "y"}) {
            INFO(tensor);
            CHECK(at(report, tensor).status == Status::exact);
          }
          if (mode == "ulysses") {
            for (const std::string tensor :
                 {"grad(y.q_rot)", "grad(y.k_shard)", "grad(y.v_shard)", "grad(x)"}) {
              INFO(tensor);
              CHECK(at(report, tensor).status == Status::exact);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("sharded queries: ring differs from the oracle by reordering only, forward and grads",
          "[attention_sharded]") {
  // The log-sum-exp merges and the dK/dV sums travelling the ring reorder the dense sums: a gap
  // that shrinks with the precision. At mp256 a reordering of sums of a few dozen terms of
  // magnitude <= ~10 moves the result by a few ulps of 2^-256 relative; 2^-230 leaves 2^26 of
  // headroom and is still ~2^-180 below anything a semantic bug (a wrong mask or a missed
  // block, relative gaps >= 1e-3 here) would give.
  const double bound = std::ldexp(1.0, -230);
  for (const std::string split : {"chunk", "balanced", "zigzag"}) {
    for (int ranks = 1; ranks <= 4; ++ranks) {
      const Setup s{"ring", "Shard(seq, " + split + ")", ranks};
      INFO(split << ", " << ranks << " ranks");
      CHECK(run(s, "f32").pass);
      const RunReport mp = run(s, "mp256");
      CHECK(mp.pass);
      for (const std::string tensor : {"y.lse", "y.attn", "y", "grad(y.q_rot)", "grad(y.k_shard)",
                                       "grad(y.v_shard)", "grad(x)", "grad(wq)", "grad(wo)"}) {
        INFO(tensor);
        CHECK(at(mp, tensor).status != Status::fail);
        CHECK(at(mp, tensor).max_rel.to_double() <= bound);
      }
    }
  }
}

TEST_CASE("zigzag shares reach the attention's boundaries as the layout gives them",
          "[attention_sharded]") {
  // 13 tokens over 2 ranks, zigzag: rank 0 seq [0:4)+[12:13), rank 1 [4:12) (placement.hpp).
  const RunReport report = run({"ring", "Shard(seq, zigzag)", 2}, "f64");
  const BoundaryResult& q = at(report, "y.q_rot");
  REQUIRE(q.entry.ranks.size() == 2);
  CHECK(q.entry.ranks[0].slice == "seq[0:4)+[12:13)");
  CHECK(q.entry.ranks[0].local_shape.extent("seq") == 5);
  CHECK(q.entry.ranks[1].slice == "seq[4:12)");
  CHECK(at(report, "y.k_shard").entry.ranks[0].slice == "kv[0:4)+[12:13)");
}

TEST_CASE("mask_zigzag_contiguous fails at the first mask of a rank with two pieces",
          "[attention_sharded]") {
  // 13 over 2: rank 0's second piece (position 12) is masked as position 4, so its lse differs
  // first at seq 12; rank 1's share is one run and is right. allgather: op attention; ring: the
  // ring's merge records the lse (op ring_attention).
  for (const std::string mode : {"allgather", "ring"}) {
    INFO(mode);
    Setup s{mode, "Shard(seq, zigzag)", 2};
    s.faults = "\"mask_zigzag_contiguous\"";
    const RunReport report = run(s, "f64");
    REQUIRE_FALSE(report.pass);
    REQUIRE(report.first_divergence.has_value());
    CHECK(report.first_divergence->tensor == "y.lse");
    CHECK(report.first_divergence->rank == 0);
    // index: [batch, seq, head], outermost first
    REQUIRE(report.first_divergence->index.size() == 3);
    CHECK(report.first_divergence->index[1] == std::pair<std::string, std::int64_t>{"seq", 12});
  }
}

TEST_CASE("sharded queries: bad combinations get one located error", "[attention_sharded]") {
  struct Case {
    Setup setup;
    std::string message;
  };
  const Case cases[] = {
      {{"ring", "Shard(seq, padded)"}, "chunk, balanced or zigzag split"},
      {{"allgather", "Shard(seq)", 2, 13, 3, "\"mask_zigzag_contiguous\""}, "Shard(seq, zigzag)"},
      {{"ulysses", "Shard(seq, zigzag)", 2, 13, 3, "\"mask_zigzag_contiguous\""},
       "\"allgather\" or \"ring\""},
      {{"ring", "Shard(seq, zigzag)", 2, 13, 3, "\"rope_local_positions\""}, "Replicate input"},
  };
  for (const Case& c : cases) {
    INFO(c.setup.mode << " " << c.setup.placement << " " << c.setup.faults);
    CHECK_THROWS_AS(shardsim::parse_scenario(scenario_text(c.setup), "t.toml"),
                    shardsim::InputError);
    CHECK_THROWS_WITH(shardsim::parse_scenario(scenario_text(c.setup), "t.toml"),
                      Contains("t.toml:") && Contains(c.message));
  }
}
