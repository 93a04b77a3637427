// Tests for the runner over a transport (runner-inl.hpp, step_env.hpp): the dense oracle runs on
// process 0 alone. P "processes" are threads over an in-memory transport (thread_transport.hpp).
// Each process's sink records what it is handed at every boundary. Process 0 must be handed,
// boundary by boundary, exactly what the single-process run hands its sink (the same trace
// entries, the same oracle tensors bitwise, every rank's local bitwise); every other process must
// be handed the trace entries alone: no oracle tensor and no rank's values, because it computes
// no oracle and receives no boundary gather.
#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "core/io.hpp"
#include "runner/runner.hpp"
#include "scenario/scenario.hpp"
#include "thread_transport.hpp"

using namespace shardsim;

namespace {

struct Seen {
  TraceEntry entry;
  bool has_dense = false;
  Tensor<double> dense;
  std::vector<Tensor<double>> locals;  // what the sink could read of every rank
};

class Recorder final : public BoundarySink<double> {
 public:
  bool on_boundary(const TraceEntry& entry, const Tensor<double>* dense,
                   const DistTensor<double>& sharded) override {
    Seen s{entry, dense != nullptr, dense ? *dense : Tensor<double>(), {}};
    for (int r = 0; r < sharded.ranks(); ++r) s.locals.push_back(sharded.local(r));
    seen.push_back(std::move(s));
    return false;
  }
  std::vector<Seen> seen;
};

// A sink that records nothing (the f32 run below only has to raise).
class Ignore final : public BoundarySink<float> {
 public:
  bool on_boundary(const TraceEntry&, const Tensor<float>*, const DistTensor<float>&) override {
    return false;
  }
};

bool same_values(const Tensor<double>& a, const Tensor<double>& b) {
  if (!(a.shape() == b.shape()) || a.numel() != b.numel()) return false;
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    if (!ScalarTraits<double>::identical(a[i], b[i])) return false;
  }
  return true;
}

// Runs `scenario` at f64 over `processes` threads; returns each process's recorder.
std::vector<Recorder> run_over(const Scenario& scenario, int processes) {
  test::Mailboxes boxes(processes);
  std::vector<Recorder> sinks(static_cast<std::size_t>(processes));
  std::vector<std::thread> threads;
  for (int p = 0; p < processes; ++p) {
    threads.emplace_back([&, p] {
      RunOptions options;
      options.transport = std::make_shared<test::ThreadTransport>(boxes, p, processes);
      run_scenario<double>(scenario, options, sinks[static_cast<std::size_t>(p)]);
    });
  }
  for (std::thread& t : threads) t.join();
  return sinks;
}

void check_oracle_on_root(const std::string& file, int processes) {
  INFO(file << " over " << processes << " processes");
  const Scenario scenario = load_scenario(std::string(SHARDSIM_SOURCE_DIR) + "/scenarios/" + file);
  Recorder local;
  run_scenario<double>(scenario, RunOptions{}, local);
  const std::vector<Recorder> sinks = run_over(scenario, processes);
  int with_oracle = 0;
  for (const Seen& s : local.seen) with_oracle += s.has_dense ? 1 : 0;
  REQUIRE(with_oracle > 0);
  for (int p = 0; p < processes; ++p) {
    const std::vector<Seen>& seen = sinks[static_cast<std::size_t>(p)].seen;
    REQUIRE(seen.size() == local.seen.size());
    for (std::size_t i = 0; i < seen.size(); ++i) {
      const Seen& want = local.seen[i];
      const Seen& got = seen[i];
      INFO("process " << p << ", boundary #" << i << " " << want.entry.op << " -> "
                      << want.entry.tensor);
      // The trace is every process's: the same entry, including the exactness claim (process
      // 0's verdict travels to all).
      REQUIRE(got.entry.id == want.entry.id);
      REQUIRE(got.entry.op == want.entry.op);
      REQUIRE(got.entry.tensor == want.entry.tensor);
      REQUIRE(got.entry.exact == want.entry.exact);
      if (p != 0) {
        REQUIRE_FALSE(got.has_dense);
        REQUIRE(got.locals.empty());
        continue;
      }
      REQUIRE(got.has_dense == want.has_dense);
      if (want.has_dense) REQUIRE(same_values(got.dense, want.dense));
      REQUIRE(got.locals.size() == want.locals.size());
      for (std::size_t r = 0; r < want.locals.size(); ++r) {
        REQUIRE(same_values(got.locals[r], want.locals[r]));
      }
    }
  }
}

}  // namespace

TEST_CASE("over 2 and 3 processes the oracle runs on process 0 alone, its comparison bitwise",
          "[transport]") {
  // A training step of each kind of runner path: row-sharded LayerNorm with SGD, streamed ring
  // attention with its KV cache, gradient accumulation (the whole-batch oracle pass), flat FSDP
  // with its gathers and reduce-scatters, and a seeded bug (its divergence found on process 0).
  for (const char* file : {"layernorm_train_sequence_sharded.toml",
                           "attention_stream_cp2_ring.toml", "micro_batches_dp_tp_mlp.toml",
                           "fsdp_flat_mlp.toml", "faults/attention_cache_raw_k.toml"}) {
    check_oracle_on_root(file, 2);
  }
  check_oracle_on_root("mesh_dp_cp_tp_training.toml", 3);
}

TEST_CASE("over processes an oracle that is not finite is bad input on every process",
          "[transport]") {
  // x = 3e38 everywhere: at f32 LayerNorm's row sum overflows, so the oracle's y.mean is inf on
  // process 0 (boundaries #0-#2 are the inputs x, ln.weight and ln.bias; #3 is y.mean;
  // robustness_hostile_test.cpp has the single-process case). Process 1 computes no oracle; it
  // must raise process 0's error, not wait for a boundary that never comes.
  std::string text =
      read_file(std::string(SHARDSIM_SOURCE_DIR) + "/scenarios/layernorm_sequence_sharded.toml");
  const std::string from = "init = { dist = \"normal\", mean = 0.5, std = 2.0 }";
  REQUIRE(text.find(from) != std::string::npos);
  text.replace(text.find(from), from.size(), "init = { dist = \"constant\", value = 3e38 }");
  const Scenario scenario = parse_scenario(text, "huge.toml");
  test::Mailboxes boxes(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int p = 0; p < 2; ++p) {
    threads.emplace_back([&, p] {
      RunOptions options;
      options.transport = std::make_shared<test::ThreadTransport>(boxes, p, 2);
      Ignore sink;
      try {
        run_scenario<float>(scenario, options, sink);
      } catch (const InputError& e) {
        errors[static_cast<std::size_t>(p)] = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  REQUIRE_THAT(errors[0],
               Catch::Contains("huge.toml: the oracle is not finite at boundary #3 "
                               "(step 1, chunk 1, layer_norm -> y.mean) in the f32 run"));
  REQUIRE(errors[1] == errors[0]);
}
