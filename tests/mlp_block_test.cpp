// End-to-end tests of the Megatron sequence-parallel MLP block (scenarios/mlp_*.toml): it trains
// for 2 steps against the dense block at every precision, every sequence<->tensor transition and
// its backward conjugate appears in the trace with global and per-rank local shapes, the
// bitwise claims hold where the arithmetic is the dense arithmetic, and the report does not
// depend on the rank schedule.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "compare/compare.hpp"
#include "report/report.hpp"
#include "scenario/scenario.hpp"

using shardsim::BoundaryResult;
using shardsim::Placement;
using shardsim::RunReport;
using shardsim::Shape;
using shardsim::Status;

namespace {

shardsim::Scenario scenario(const std::string& name) {
  return shardsim::load_scenario(std::string(SHARDSIM_SOURCE_DIR) + "/scenarios/" + name);
}

const BoundaryResult& find(const RunReport& run, int step, const std::string& op,
                           const std::string& tensor) {
  for (const BoundaryResult& b : run.boundaries) {
    if (b.entry.step == step && b.entry.op == op && b.entry.tensor == tensor) return b;
  }
  FAIL("no boundary " << op << " -> " << tensor << " in step " << step);
  return run.boundaries.front();
}

std::vector<std::int64_t> local_seq(const BoundaryResult& b) {
  std::vector<std::int64_t> out;
  for (const auto& rank : b.entry.ranks) out.push_back(rank.local_shape.extent("seq"));
  return out;
}

const Shape kTokens({{"batch", 2}, {"seq", 13}, {"hidden", 16}});

}  // namespace

TEST_CASE("the SP MLP block trains for 2 steps against the dense block at every precision",
          "[mlp]") {
  const auto sp = scenario("mlp_sequence_parallel.toml");
  REQUIRE(sp.precisions.size() == 3);
  for (const shardsim::Precision& precision : sp.precisions) {
    const RunReport run = shardsim::evaluate(sp, precision);
    INFO(precision.name());
    CHECK(run.pass);
    for (int step : {1, 2}) {
      INFO("training step " << step);
      // Forward: LayerNorm on sequence shards, all-gather, ..., reduce-scatter back.
      const BoundaryResult& gathered = find(run, step, "all_gather", "ln.full");
      CHECK(gathered.entry.global == kTokens);
      CHECK(gathered.entry.layout.on(0) == Placement::replicate());
      CHECK(local_seq(gathered) == std::vector<std::int64_t>{13, 13, 13, 13});
      const BoundaryResult& scattered = find(run, step, "reduce_scatter", "o.seq");
      CHECK(scattered.entry.global == kTokens);
      CHECK(scattered.entry.layout.on(0) == Placement::shard("seq"));
      CHECK(local_seq(scattered) == std::vector<std::int64_t>{4, 4, 4, 1});
      CHECK(scattered.entry.ranks[3].slice == "seq[12:13)");
      CHECK(find(run, step, "linear", "o").entry.layout.on(0) == Placement::partial());
      CHECK(find(run, step, "linear", "h").entry.layout.on(0) == Placement::shard("ffn"));
      // Backward conjugates: the gradient of the reduce-scattered (Partial) output is
      // all-gathered; the Partial gradient of the all-gathered input is reduce-scattered.
      const BoundaryResult& back_gather = find(run, step, "all_gather", "grad(o)@o.seq");
      CHECK(back_gather.entry.dense == "grad(o.seq)");
      CHECK(back_gather.entry.layout.on(0) == Placement::replicate());
      CHECK(local_seq(back_gather) == std::vector<std::int64_t>{13, 13, 13, 13});
      const BoundaryResult& back_scatter = find(run, step, "reduce_scatter", "grad(ln)@ln.full");
      CHECK(back_scatter.entry.layout.on(0) == Placement::shard("seq"));
      CHECK(local_seq(back_scatter) == std::vector<std::int64_t>{4, 4, 4, 1});
      CHECK(find(run, step, "linear_backward", "grad(ln.full)").entry.layout.on(0) ==
            Placement::partial());
      // Sharded parameters keep their placement through SGD; Replicate ones are all-reduced.
      CHECK(find(run, step, "sgd", "fc1.weight").entry.layout.on(0) == Placement::shard("ffn"));
      CHECK(find(run, step, "all_reduce", "grad(fc2.bias)").entry.layout.on(0) ==
            Placement::replicate());
      CHECK(find(run, step, "replica_check", "fc2.bias@replicas").status == Status::exact);
    }
    // In step 1 every input matches, so each claim of the dense arithmetic must hold bitwise:
    // LayerNorm rows, data movement, the column-parallel dot products, gelu, the dropout mask.
    for (const auto& [op, tensor] : std::vector<std::pair<std::string, std::string>>{
             {"layer_norm", "ln"}, {"all_gather", "ln.full"}, {"linear", "h"}, {"gelu", "a"},
             {"dropout", "d.mask"}, {"dropout_repetition", "d.mask@repetition"}}) {
      const BoundaryResult& b = find(run, 1, op, tensor);
      INFO(op << " -> " << tensor);
      CHECK(b.entry.exact);
      CHECK(b.status == Status::exact);
    }
    // The row-parallel Partial sum is a reordered dot product: not claimed, measured.
    CHECK_FALSE(find(run, 1, "linear", "o").entry.exact);
  }
}

TEST_CASE("the MLP blocks without dropout and without sequence parallelism pass too", "[mlp]") {
  for (const char* name : {"mlp_sequence_parallel_no_dropout.toml", "mlp_tensor_parallel.toml"}) {
    INFO(name);
    const auto s = scenario(name);
    const RunReport run = shardsim::evaluate(s, shardsim::parse_precision("f64"));
    CHECK(run.pass);
  }
  // p = 0: the dropout output is its input, bit for bit.
  const RunReport off = shardsim::evaluate(scenario("mlp_sequence_parallel_no_dropout.toml"),
                                           shardsim::parse_precision("f32"));
  CHECK(find(off, 1, "dropout", "d").status == Status::within);  // as o.seq, which is within
  CHECK(find(off, 1, "dropout", "d").max_abs == find(off, 1, "reduce_scatter", "o.seq").max_abs);
  // Plain TP: Megatron's f (identity forward) and g (all-reduce forward).
  const RunReport tp = shardsim::evaluate(scenario("mlp_tensor_parallel.toml"),
                                          shardsim::parse_precision("f64"));
  CHECK(find(tp, 1, "identity", "ln.tp").entry.layout.on(0) == Placement::replicate());
  CHECK(find(tp, 1, "all_reduce", "o.full").entry.layout.on(0) == Placement::replicate());
  CHECK(find(tp, 1, "all_reduce", "grad(ln)@ln.tp").entry.layout.on(0) == Placement::replicate());
}

TEST_CASE("the SP MLP block's report does not depend on the rank schedule", "[mlp][scheduler]") {
  const auto sp = scenario("mlp_sequence_parallel.toml");
  auto report_under = [&](const std::string& schedule) {
    shardsim::RunOptions options;
    options.schedule = shardsim::parse_schedule(schedule);
    std::vector<RunReport> runs{shardsim::evaluate(sp, shardsim::parse_precision("f64"), options)};
    runs.front().schedule = {};  // the one field that names the schedule
    return shardsim::report_json(sp, runs, shardsim::judge(sp, runs));
  };
  const std::string reference = report_under("rank");
  CHECK(report_under("reverse") == reference);
  CHECK(report_under("shuffle:99") == reference);
}
