// Tests for --oracle distributed (oracle_rows.hpp, root_compare-inl.hpp): every process computes
// the dense oracle on its rows of the batch axis and process 0 compares block by block. P
// "processes" are threads over an in-memory transport (thread_transport.hpp). Process 0's
// comparator must reach, boundary by boundary, exactly the single process's results (status,
// max errors, scale, the first divergence with its rank, index and values), since the comparison
// visits the same elements against the same oracle values, only in another order.
#include <catch2/catch.hpp>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "compare/compare.hpp"
#include "core/error.hpp"
#include "core/io.hpp"
#include "core/mp.hpp"
#include "core/mp_exact.hpp"
#include "runner/oracle_rows.hpp"
#include "scenario/scenario.hpp"
#include "compare/compare-inl.hpp"
#include "thread_transport.hpp"

using namespace shardsim;

namespace {

std::string source(const std::string& path) {
  return std::string(SHARDSIM_SOURCE_DIR) + "/" + path;
}

// Runs `scenario` at T over `processes` threads with the distributed oracle; returns process
// 0's results, after requiring that no process failed and every process traced as many
// boundaries. With `errors`: returns nothing and hands back each process's error text instead.
// `elements`: RunOptions::oracle_exchange_elements (1: one batch row per exchange).
template <typename T>
std::vector<BoundaryResult> run_distributed(const Scenario& scenario, const char* precision,
                                            int processes,
                                            std::vector<std::string>* errors = nullptr,
                                            std::int64_t elements = std::int64_t{1} << 16) {
  test::Mailboxes boxes(processes);
  std::vector<std::unique_ptr<Comparator<T>>> sinks;
  for (int p = 0; p < processes; ++p) {
    sinks.push_back(std::make_unique<Comparator<T>>(scenario.rtol(parse_precision(precision))));
  }
  std::vector<std::string> failed(static_cast<std::size_t>(processes));
  std::vector<std::size_t> traced(static_cast<std::size_t>(processes), 0);
  std::vector<std::thread> threads;
  for (int p = 0; p < processes; ++p) {
    threads.emplace_back([&, p] {
      RunOptions options;
      options.transport = std::make_shared<test::ThreadTransport>(boxes, p, processes);
      options.distributed_oracle = true;
      options.oracle_exchange_elements = elements;
      try {
        traced[static_cast<std::size_t>(p)] =
            run_scenario<T>(scenario, options, *sinks[static_cast<std::size_t>(p)]).size();
      } catch (const std::exception& e) {
        failed[static_cast<std::size_t>(p)] = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  if (errors) {
    *errors = failed;
    return {};
  }
  for (const std::string& e : failed) {
    INFO(e);
    REQUIRE(e.empty());
  }
  for (std::size_t t : traced) REQUIRE(t == sinks[0]->results().size());
  return std::move(sinks[0]->results());
}

template <typename T>
std::vector<BoundaryResult> run_local(const Scenario& scenario, const char* precision) {
  Comparator<T> sink(scenario.rtol(parse_precision(precision)));
  run_scenario<T>(scenario, RunOptions{}, sink);
  return std::move(sink.results());
}

void require_same(const std::vector<BoundaryResult>& got, const std::vector<BoundaryResult>& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    const BoundaryResult& g = got[i];
    const BoundaryResult& w = want[i];
    INFO("boundary #" << i << " " << w.entry.op << " -> " << w.entry.tensor);
    REQUIRE(g.entry.tensor == w.entry.tensor);
    REQUIRE(g.entry.exact == w.entry.exact);
    REQUIRE(g.status == w.status);
    REQUIRE(g.max_abs == w.max_abs);
    REQUIRE(g.max_rel == w.max_rel);
    REQUIRE(g.max_ulp == w.max_ulp);
    REQUIRE(g.scale == w.scale);
    REQUIRE(g.first_bad.has_value() == w.first_bad.has_value());
    if (!w.first_bad) continue;
    REQUIRE(g.first_bad->rank == w.first_bad->rank);
    REQUIRE(g.first_bad->index == w.first_bad->index);
    REQUIRE(g.first_bad->dense == w.first_bad->dense);
    REQUIRE(g.first_bad->sharded == w.first_bad->sharded);
    REQUIRE(g.first_bad->dense_text == w.first_bad->dense_text);
    REQUIRE(g.first_bad->sharded_text == w.first_bad->sharded_text);
    REQUIRE(g.first_bad->reason == w.first_bad->reason);
  }
}

// How many of `results` compare an oracle tensor with the batch axis (compared block by block).
int blocked(const std::vector<BoundaryResult>& results) {
  int n = 0;
  for (const BoundaryResult& r : results) {
    n += r.entry.global.has(kOracleRowsAxis) && r.status != Status::unchecked ? 1 : 0;
  }
  return n;
}

}  // namespace

TEST_CASE("oracle row blocks follow tensor_split and map flat positions both ways",
          "[distributed]") {
  // 8 rows over 3 processes: sizes 3, 3, 2 (the first 8 mod 3 = 2 blocks hold one more).
  const std::vector<std::pair<std::int64_t, std::int64_t>> want{{0, 3}, {3, 6}, {6, 8}};
  for (int p = 0; p < 3; ++p) {
    const OracleRows rows = oracle_rows(8, p, 3);
    REQUIRE(rows.begin == want[static_cast<std::size_t>(p)].first);
    REQUIRE(rows.end == want[static_cast<std::size_t>(p)].second);
  }
  // batch in the middle: [seq=3, batch=5, hidden=2], rows 1-3. Block element (s, b, h) is global
  // element (s, b + 1, h): flat s*10 + (b+1)*2 + h, block flat s*6 + b*2 + h.
  const Shape global({{"seq", 3}, {"batch", 5}, {"hidden", 2}});
  OracleRows rows;
  rows.begin = 1;
  rows.end = 4;
  const RowsIndex index(global, rows);
  for (std::int64_t s = 0; s < 3; ++s) {
    for (std::int64_t b = 0; b < 3; ++b) {
      for (std::int64_t h = 0; h < 2; ++h) {
        const std::int64_t g = s * 10 + (b + 1) * 2 + h;
        REQUIRE(index.to_global(s * 6 + b * 2 + h) == g);
        REQUIRE(index.to_block(g) == s * 6 + b * 2 + h);
        REQUIRE(index.row_of(g) == b + 1);
      }
    }
  }
}

TEST_CASE("for_each_valid_in_rows visits for_each_valid's positions in the rows, in its order",
          "[distributed]") {
  // A padded Shard(batch) local next to a zigzag-free box: rank 1 of batch 7 padded over 3 ranks
  // holds rows 3-5 (local extent 3); rows [4, 7) keep its local rows 1 and 2.
  const Shape global({{"batch", 7}, {"hidden", 3}});
  const std::vector<Slice> box{{.begin = 3, .end = 6, .local_extent = 3},
                               {.begin = 0, .end = 3, .local_extent = 3}};
  const Shape local({{"batch", 3}, {"hidden", 3}});
  std::vector<std::pair<std::int64_t, std::int64_t>> all;
  for_each_valid(local, box, global, [&](std::int64_t l, std::int64_t g) {
    if (g / 3 >= 4) all.emplace_back(l, g);
  });
  std::vector<std::pair<std::int64_t, std::int64_t>> rows;
  for_each_valid_in_rows(local, box, global, 0, 4, 7,
                         [&](std::int64_t l, std::int64_t g) { rows.emplace_back(l, g); });
  REQUIRE(all.size() == 6);
  REQUIRE(rows == all);
}

TEST_CASE("with the oracle in row blocks process 0 reaches the single process's results",
          "[distributed][transport]") {
  // A passing SP MLP block (a Partial row-linear output, reduce-scatter, dropout by global
  // index), a cp x tp block (ring attention on a 2-D mesh), and a seeded bug that fails inside
  // streamed attention (its first divergence found across blocks), at f64; the MLP also at mp.
  for (const char* file :
       {"tests/mpi/distributed_mlp_sp.toml", "tests/mpi/distributed_cp_tp_block.toml",
        "tests/mpi/distributed_rope_local_positions.toml"}) {
    const Scenario scenario = load_scenario(source(file));
    const std::vector<BoundaryResult> local = run_local<double>(scenario, "f64");
    REQUIRE(blocked(local) > 5);
    for (int processes : {2, 3}) {
      if (processes > scenario.mesh.ranks()) continue;
      INFO(file << " over " << processes << " processes");
      require_same(run_distributed<double>(scenario, "f64", processes), local);
      // One batch row per exchange: a block arrives in several groups of rows.
      require_same(run_distributed<double>(scenario, "f64", processes, nullptr, 1), local);
    }
  }
  const Scenario mlp = load_scenario(source("tests/mpi/distributed_mlp_sp.toml"));
  set_mp_precision(256);
  const std::vector<BoundaryResult> mp_local = run_local<Mp>(mlp, "mp256");
  require_same(run_distributed<Mp>(mlp, "mp256", 3), mp_local);
  require_same(run_distributed<Mp>(mlp, "mp256", 2, nullptr, 1), mp_local);
}

TEST_CASE("with the oracle in row blocks training carries every row sum from block to block",
          "[distributed][transport]") {
  // The loss sum and count and every parameter gradient (LayerNorm, both linears' weights and
  // biases) are carried from process to process in row order (chain_rows), so the losses, the
  // gradients, the SGD steps and the replica checks of the SP MLP block over 2 training steps
  // are the single process's; batch 3 so that 3 processes each hold a row.
  std::string text = read_file(source("scenarios/mlp_sequence_parallel.toml"));
  const std::string shape = "shape = [2, 13, 16]";
  for (std::size_t at = text.find(shape); at != std::string::npos; at = text.find(shape)) {
    text.replace(at, shape.size(), "shape = [3, 13, 16]");
  }
  const Scenario mlp = parse_scenario(text, "mlp3.toml");
  const std::vector<BoundaryResult> local = run_local<double>(mlp, "f64");
  int params = 0;
  for (const BoundaryResult& r : local) params += r.entry.op == "sgd" ? 1 : 0;
  REQUIRE(params == 2 * 6);  // 6 parameters, 2 steps
  require_same(run_distributed<double>(mlp, "f64", 2), local);
  require_same(run_distributed<double>(mlp, "f64", 3, nullptr, 1), local);
  const Scenario ln = load_scenario(source("scenarios/layernorm_train_sequence_sharded.toml"));
  require_same(run_distributed<double>(ln, "f64", 2), run_local<double>(ln, "f64"));
  set_mp_precision(256);
  require_same(run_distributed<Mp>(mlp, "mp256", 3), run_local<Mp>(mlp, "mp256"));
}

TEST_CASE("with the oracle in row blocks, batch need not be the leading axis", "[distributed]") {
  // layernorm_sequence_sharded with its axes reordered to [seq=13, batch=3, hidden=16]: a block
  // of batch rows is then strided in the global tensor.
  std::string text = read_file(source("scenarios/layernorm_sequence_sharded.toml"));
  const std::string axes = "axes = [\"batch\", \"seq\", \"hidden\"]\nshape = [2, 13, 16]";
  REQUIRE(text.find(axes) != std::string::npos);
  text.replace(text.find(axes), axes.size(),
               "axes = [\"seq\", \"batch\", \"hidden\"]\nshape = [13, 3, 16]");
  const Scenario scenario = parse_scenario(text, "strided.toml");
  const std::vector<BoundaryResult> local = run_local<double>(scenario, "f64");
  REQUIRE(blocked(local) >= 3);  // x, y.mean, y.rstd, y
  require_same(run_distributed<double>(scenario, "f64", 2), local);
  require_same(run_distributed<double>(scenario, "f64", 3), local);
  require_same(run_distributed<double>(scenario, "f64", 2, nullptr, 1), local);
}

TEST_CASE("with the oracle in row blocks a non-finite oracle raises the local error everywhere",
          "[distributed][transport]") {
  // x = 3e38 everywhere: at f32 the LayerNorm row sums overflow in every block; the error names
  // the first element in global order (batch=0, seq=0), as the single process does.
  std::string text = read_file(source("scenarios/layernorm_sequence_sharded.toml"));
  const std::string from = "init = { dist = \"normal\", mean = 0.5, std = 2.0 }";
  REQUIRE(text.find(from) != std::string::npos);
  text.replace(text.find(from), from.size(), "init = { dist = \"constant\", value = 3e38 }");
  const Scenario scenario = parse_scenario(text, "huge.toml");
  std::string local;
  try {
    run_local<float>(scenario, "f32");
  } catch (const InputError& e) {
    local = e.what();
  }
  REQUIRE_THAT(local, Catch::Contains("huge.toml: the oracle is not finite at boundary #3"));
  std::vector<std::string> errors;
  run_distributed<float>(scenario, "f32", 2, &errors);
  REQUIRE(errors[0] == local);
  REQUIRE(errors[1] == local);
}

TEST_CASE("the distributed oracle refuses what row blocks would reorder", "[distributed]") {
  auto refusal = [](const std::string& file, int processes) {
    try {
      check_distributed_oracle(load_scenario(source(file)), processes);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  REQUIRE(refusal("tests/mpi/distributed_mlp_sp.toml", 3).empty());
  REQUIRE(
      refusal("tests/mpi/distributed_rope_local_positions.toml", 2).empty());  // [stream] on seq
  REQUIRE(refusal("scenarios/mlp_sequence_parallel.toml", 2).empty());         // training, a loss
  REQUIRE_THAT(refusal("scenarios/attention_train_sgd_ring.toml", 2),
               Catch::Contains("steps[0] (sliding_window_attention): --oracle distributed: in "
                               "training, attention's weight gradients"));
  REQUIRE_THAT(refusal("tests/mpi/distributed_mlp_sp.toml", 4),
               Catch::Contains("4 processes for 3 'batch' rows"));
  // A norm over the batch axis, an input without it, a loss in a forward-only scenario.
  std::string text = read_file(source("scenarios/layernorm_sequence_sharded.toml"));
  const std::string axis = "axis = \"hidden\"";
  REQUIRE(text.find(axis) != std::string::npos);
  std::string over_batch = text;
  over_batch.replace(over_batch.find(axis), axis.size(), "axis = \"batch\"");
  const std::string ln_weight = "axes = [\"hidden\"]\nshape = [16]";
  while (over_batch.find(ln_weight) != std::string::npos) {
    over_batch.replace(over_batch.find(ln_weight), ln_weight.size(),
                       "axes = [\"batch\"]\nshape = [2]");
  }
  try {
    check_distributed_oracle(parse_scenario(over_batch, "b.toml"), 2);
    FAIL("a norm over batch was accepted");
  } catch (const InputError& e) {
    REQUIRE_THAT(e.what(), Catch::Contains("steps[0] (layer_norm): --oracle distributed: this "
                                           "norm reduces over 'batch'"));
  }
  std::string no_batch = text;
  const std::string axes = "axes = [\"batch\", \"seq\", \"hidden\"]\nshape = [2, 13, 16]";
  no_batch.replace(no_batch.find(axes), axes.size(),
                   "axes = [\"row\", \"seq\", \"hidden\"]\nshape = [2, 13, 16]");
  try {
    check_distributed_oracle(parse_scenario(no_batch, "n.toml"), 2);
    FAIL("an input without batch was accepted");
  } catch (const InputError& e) {
    REQUIRE_THAT(e.what(),
                 Catch::Contains("input 'x' [row=2, seq=13, hidden=16] has no 'batch' axis"));
  }
}
