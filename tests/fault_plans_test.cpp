// Tests for the loader's refusal of a fault that would change nothing the scenario runs
// (sim/scenario/fault_plans.cpp): it is refused at its faults[i] entry with the reason, and the
// refusal is right: injected past the loader, every refused fault leaves the run exactly as the
// clean one (each boundary's status and ulp distance equal).
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "scenario_test_support.hpp"
#include "compare/compare.hpp"
#include "core/error.hpp"
#include "scenario/scenario.hpp"

using namespace shardsim;
namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// `text` without its [expect] (a fault may change the verdict).
std::string without_expect(std::string text) {
  const std::size_t expect = text.find("\n[expect]");
  if (expect != std::string::npos) {
    const std::size_t next = text.find("\n[", expect + 1);
    text.erase(expect + 1, next == std::string::npos ? std::string::npos : next - expect);
  }
  return text;
}

// `text` without its [expect] and with `faults = ["NAME"]` as the last top-level key (before
// the first table).
std::string with_fault(std::string text, const std::string& name) {
  text = without_expect(std::move(text));
  const std::size_t table = text.starts_with("[") ? 0 : text.find("\n[") + 1;
  text.insert(table, "faults = [\"" + name + "\"]\n");
  return text;
}

std::string refusal(const std::string& text, const std::string& file) {
  try {
    parse_scenario(text, file);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// The scenario of the gradient-reduction test below.
constexpr const char* kWrongDimNowhere = R"toml(name = "wrong_dim_nowhere"
seed = 3
train_steps = 1
learning_rate = 0.1

[mesh]
dims = { dp = 2, tp = 2 }

[[tensors]]
name = "x"
axes = ["batch", "seq", "hidden"]
shape = [2, 3, 8]
init = { dist = "normal", mean = 0.0, std = 1.0 }
placement = { dp = "Shard(batch)", tp = "Shard(hidden)" }

[[tensors]]
name = "target"
role = "target"
axes = ["batch", "seq", "hidden"]
shape = [2, 3, 8]
init = { dist = "uniform", low = -1.0, high = 1.0 }
placement = { dp = "Shard(batch)" }

[[tensors]]
name = "w"
role = "parameter"
axes = ["hidden"]
shape = [8]
init = { dist = "uniform", low = 0.5, high = 1.5 }
placement = { tp = "Shard(hidden)" }

[[steps]]
op = "layer_norm"
mesh_dim = "tp"
input = "x"
weight = "w"
output = "y"
stats = "welford"

[[steps]]
op = "redistribute"
mesh_dim = "tp"
input = "y"
output = "y_whole"
to = "Replicate"

[[steps]]
op = "mse_loss"
mesh_dim = "tp"
input = "y_whole"
target = "target"
output = "loss"
)toml";

// `scenario` run at f64 with `fault` injected past the loader measures as `clean` (its run
// without it). A faulty plan may record other intermediates (rope_after_gather_wrong_offset
// rotates the gathered keys, not each shard's): the verdict must agree, and every boundary the
// two runs share must measure the same.
void check_unchanged(Scenario scenario, Fault fault, const RunReport& clean) {
  scenario.faults = {fault};
  const RunReport faulty = evaluate(scenario, parse_precision("f64"));
  CHECK(faulty.pass == clean.pass);
  // A boundary's name, with its occurrence: a gradient two steps add to (gate and up reading one
  // input) records the same op and tensor twice, the first addend and then the sum.
  auto keys = [](const RunReport& run) {
    std::map<std::string, int> seen;
    std::vector<std::string> out;
    for (const BoundaryResult& b : run.boundaries) {
      const std::string name = std::to_string(b.entry.step) + "/" +
                               std::to_string(b.entry.chunk) + "/" +
                               std::to_string(b.entry.micro) + " " + b.entry.op + " -> " +
                               b.entry.tensor;
      out.push_back(name + " #" + std::to_string(++seen[name]));
    }
    return out;
  };
  const std::vector<std::string> clean_keys = keys(clean);
  const std::vector<std::string> faulty_keys = keys(faulty);
  std::map<std::string, const BoundaryResult*> shared;
  for (std::size_t i = 0; i < clean.boundaries.size(); ++i) {
    shared[clean_keys[i]] = &clean.boundaries[i];
  }
  std::size_t matched = 0;
  for (std::size_t i = 0; i < faulty.boundaries.size(); ++i) {
    const BoundaryResult& b = faulty.boundaries[i];
    const std::string& name = faulty_keys[i];
    const auto twin = shared.find(name);
    if (twin == shared.end()) continue;
    ++matched;
    INFO("boundary " << name);
    CHECK(b.status == twin->second->status);
    CHECK(b.max_ulp == twin->second->max_ulp);
  }
  // Most boundaries are the clean run's own (the comparison is not vacuous).
  CHECK(2 * matched >= faulty.boundaries.size());
}

// A bundled fault scenario's text without its faults line and [expect], every `from` made `to`
// ("shape = [2, 14," -> "shape = [2, 1,": the batch-first tensors' seq extent).
std::string clean_with(const std::string& name, const std::string& from, const std::string& to) {
  std::string text = without_expect(
      slurp(std::string(SHARDSIM_SOURCE_DIR) + "/scenarios/faults/" + name + ".toml"));
  const std::size_t faults = text.find("\nfaults = ");
  if (faults != std::string::npos) text.erase(faults + 1, text.find('\n', faults + 1) - faults);
  for (std::size_t at = text.find(from); at != std::string::npos;
       at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
  return text;
}

std::string scenario_path(const std::string& name) {
  return std::string(SHARDSIM_SOURCE_DIR) + "/scenarios/" + name + ".toml";
}

}  // namespace

TEST_CASE("a fault for a plan no step runs is refused with what it needs", "[faults]") {
  struct Case {
    const char* scenario;
    const char* fault;
    const char* reason;
  };
  const Case cases[] = {
      {"norm_hidden_welford", "combine_token_means", "changes the row-sharded LayerNorm plan"},
      {"layernorm_sequence_sharded", "hidden_shard_local_stats",
       "no layer_norm here has its input Shard on the normalized axis"},
      {"attention_train_sgd_allgather", "loss_averaged_twice",
       "every mse_loss here has its tokens whole on every rank"},
      {"mlp_sequence_parallel", "padding_in_loss", "no mse_loss here has padding"},
      {"attention_causal_cp3_ring", "window_off_by_one",
       "no sliding_window_attention here has a window shorter than its sequence"},
      {"attention_sequence_sharded_allgather", "cache_raw_k", "streams no second chunk"},
      {"fsdp_flat_mlp", "row_bias_every_rank", "no linear here has a bias and a weight Shard(in)"},
      {"fsdp_flat_mlp", "column_backward_unreduced", "no linear here has its weight Shard(out)"},
      {"mesh_row_bias_every_rank_clean", "gather_wrong_axis",
       "unless an axis before it has a local extent of 2 or more"},
      {"mlp_sequence_parallel_no_dropout", "dropout_rank_offset", "no dropout here has p > 0"},
      // Queries Replicate: every rank computes the weights' whole gradients (grad(wq) .. are
      // Replicate in the clean run's report), so there is no all-reduce to skip or average.
      {"attention_train_sgd_allgather", "unreduced_param_grads",
       "every rank computes the whole gradient"},
      // The LayerNorm's weight and bias are Shard(hidden), the only mesh dim's data split.
      {"norm_hidden_welford", "grad_reduce_mean", "no parameter here is Replicate on a dim"},
  };
  for (const Case& c : cases) {
    INFO(c.scenario << " + " << c.fault);
    const std::string path = scenario_path(c.scenario);
    const std::string error = refusal(with_fault(slurp(path), c.fault), path);
    CHECK_THAT(error, Catch::Contains(std::string("faults[0]: fault '") + c.fault +
                                      "' would change nothing this scenario runs: "));
    CHECK_THAT(error, Catch::Contains(c.reason));
  }
  // Where the plan runs, the same faults load (their bundled scenarios are the evidence that
  // they then fail: tests/norm_faults_test.cpp and the replay of every scenario).
  for (const char* fault : {"combine_token_means", "padding_in_loss"}) {
    CHECK(refusal(with_fault(slurp(scenario_path("norm_train_padded")), fault),
                  scenario_path("norm_train_padded"))
              .empty());
  }
}

TEST_CASE("a gradient-reduction fault needs a replicated parameter on a split dim", "[faults]") {
  // dp x tp: x is Shard(batch) on dp and Shard(hidden) on tp; the LayerNorm weight w is
  // Shard(hidden) on tp, so it is Replicate on dp only, where its gradient is Partial (each dp
  // rank normalizes other batch rows). Skipping or averaging that all-reduce shows;
  // grad_reduce_wrong_dim has no second dim where w is Replicate to reduce over instead
  // (runner_faults.hpp wrong_reduce_dim finds none and the reduction stays correct), so the
  // loader refuses it, and injected past the loader it changes no boundary.
  const std::string text = kWrongDimNowhere;
  const Precision f64 = parse_precision("f64");
  const RunReport clean = evaluate(parse_scenario(text, "wrong_dim_nowhere.toml"), f64);
  REQUIRE(clean.pass);
  CHECK_THAT(refusal(with_fault(text, "grad_reduce_wrong_dim"), "wrong_dim_nowhere.toml"),
             Catch::Contains("no parameter here is Replicate on a dim whose ranks hold "
                             "different data (some tensor Shard or Partial there) and on a "
                             "second dim"));
  for (const char* fault : {"unreduced_param_grads", "grad_reduce_mean"}) {
    INFO(fault);
    const std::string faulty = with_fault(text, fault);
    REQUIRE(refusal(faulty, "wrong_dim_nowhere.toml").empty());
    CHECK_FALSE(evaluate(parse_scenario(faulty, "wrong_dim_nowhere.toml"), f64).pass);
  }
  Scenario injected = parse_scenario(text, "wrong_dim_nowhere.toml");
  injected.faults = {Fault::grad_reduce_wrong_dim};
  const RunReport faulty = evaluate(injected, f64);
  CHECK(faulty.pass);
  REQUIRE(faulty.boundaries.size() == clean.boundaries.size());
  for (std::size_t i = 0; i < clean.boundaries.size(); ++i) {
    CHECK(faulty.boundaries[i].entry.tensor == clean.boundaries[i].entry.tensor);
    CHECK(faulty.boundaries[i].max_ulp == clean.boundaries[i].max_ulp);
  }
}

TEST_CASE("a fault the data cannot show is refused: short axes over many ranks", "[faults]") {
  // The bundled fault scenarios with their sequences (or batch) cut short, or their ranks cut
  // to one: one rank alone, or contiguous shares, hold every token. Each fault is refused with the
  // reason, and injected past the loader changes nothing; at the scenarios' own lengths the faults
  // load (and their bundled [expect] = fail is the evidence that they show).
  struct Case {
    const char* scenario;
    const char* fault;
    const char* from;
    const char* to;
    const char* reason;
  };
  const Case cases[] = {
      // seq 1 over 2 cp ranks: rank 1 holds no query, rank 0's rows are positions 0.
      {"attention_mask_local_query_positions", "mask_local_query_positions", "shape = [2, 14,",
       "shape = [2, 1,", "only the first rank holds queries"},
      // seq 5 zigzag over 2 ranks: chunks of 2, 2, 1, 0, so rank 0 holds [0, 2) and rank 1
      // [2, 5): both contiguous, the fault's positions are the real ones.
      {"attention_mask_zigzag_contiguous", "mask_zigzag_contiguous", "shape = [2, 12,",
       "shape = [2, 5,", "every share here is one contiguous run"},
      // seq 1 over the ranks: one rank holds the whole tensor, its local indices are global.
      {"dropout_same_seed", "dropout_same_seed", "shape = [2, 13,", "shape = [2, 1,",
       "where one rank holds the whole"},
      {"mesh_gather_wrong_axis", "gather_wrong_axis", "shape = [2, 13,", "shape = [2, 1,",
       "two or more ranks hold a piece"},
      // The ring over one rank: its keys are one block, there is nothing to merge.
      {"attention_ring_merge_average", "ring_merge_average", "ranks = 3", "ranks = 1",
       "every ring step here has its keys on one rank"},
      {"attention_ring_backward_local_lse", "ring_backward_local_lse", "ranks = 3", "ranks = 1",
       "every ring step here has its keys on one rank"},
      // batch 1 Shard(batch) over dp 4: one rank's tokens are all of them, its mean the call's.
      {"fsdp_grad_local_mean", "fsdp_grad_local_mean", "shape = [4, 7,", "shape = [1, 7,",
       "one rank holding all of its tokens"},
  };
  for (const Case& c : cases) {
    INFO(c.scenario << " with " << c.to);
    const std::string text = clean_with(c.scenario, c.from, c.to);
    const std::string error = refusal(with_fault(text, c.fault), "short.toml");
    CHECK_THAT(error, Catch::Contains(std::string("fault '") + c.fault +
                                      "' would change nothing this scenario runs"));
    CHECK_THAT(error, Catch::Contains(c.reason));
    const Scenario scenario = parse_scenario(text, "short.toml");
    check_unchanged(scenario, *find_fault(c.fault), evaluate(scenario, parse_precision("f64")));
    CHECK(refusal(with_fault(clean_with(c.scenario, c.from, c.from), c.fault), "own.toml").empty());
  }
}

TEST_CASE("every fault the loader refuses as changing nothing changes nothing", "[faults]") {
  // For each bundled scenario without faults and each fault the loader refuses there as having
  // no effect: the fault is injected past the loader and the f64 run compared with the clean
  // one boundary by boundary. A refused fault that did change something would be a plan the
  // rules misread.
  int refused = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(SHARDSIM_SOURCE_DIR) / "scenarios")) {
    if (entry.path().extension() != ".toml") continue;
    const std::string path = entry.path().string();
    const std::string text = slurp(entry.path());
    if (text.find("\nfaults = ") != std::string::npos) continue;
    std::optional<RunReport> clean;
    for (const FaultInfo& info : fault_catalogue()) {
      const std::string error = refusal(with_fault(text, info.name), path);
      if (error.find("would change nothing") == std::string::npos) continue;
      INFO(path << " + " << info.name);
      ++refused;
      const Scenario scenario = parse_scenario(without_expect(text), path);
      if (!clean) clean = evaluate(scenario, parse_precision("f64"));
      check_unchanged(scenario, info.fault, *clean);
    }
  }
  CHECK(refused > 50);  // the rules are exercised, not skipped
}

TEST_CASE("ones_init_assumed is refused where every weight already holds 1 and every bias 0",
          "[faults]") {
  // The fault re-initializes the ranks' weights to 1 and biases to 0. The bundled scenario's
  // LayerNorm with a constant weight 1.0 and bias 0.0 holds those values already (bit for bit):
  // refused, and injected past the loader it changes nothing. A bias of -0.0 is not +0 bit for
  // bit (y = 0 * w + b keeps the sign of b), and a weight of 1 beside a drawn bias leaves the
  // bias to change: both load. So does a LayerNorm with neither, where there is nothing to
  // re-initialize: refused.
  const std::string name = "norm_ones_init_assumed";
  const std::string weight = "init = { dist = \"uniform\", low = 0.5, high = 1.5 }";
  const std::string bias = "init = { dist = \"uniform\", low = -0.25, high = 0.25 }";
  const auto with = [&](const std::string& w, const std::string& b) {
    std::string text = clean_with(name, weight, w);
    const std::size_t at = text.find(bias);
    REQUIRE(at != std::string::npos);
    return text.replace(at, bias.size(), b);
  };
  const std::string ones = "init = { dist = \"constant\", value = 1.0 }";
  const std::string zeros = "init = { dist = \"constant\", value = 0.0 }";
  const std::string text = with(ones, zeros);
  const std::string error = refusal(with_fault(text, "ones_init_assumed"), "ones.toml");
  CHECK_THAT(error, Catch::Contains("fault 'ones_init_assumed' would change nothing"));
  CHECK_THAT(error, Catch::Contains("each already holds exactly those values"));
  const Scenario scenario = parse_scenario(text, "ones.toml");
  check_unchanged(scenario, Fault::ones_init_assumed, evaluate(scenario, parse_precision("f64")));
  const std::string minus_zero = "init = { dist = \"constant\", value = -0.0 }";
  CHECK(refusal(with_fault(with(ones, minus_zero), "ones_init_assumed"), "neg.toml").empty());
  CHECK(refusal(with_fault(with(ones, bias), "ones_init_assumed"), "drawn.toml").empty());
  // No weight and no bias: the step's keys and the two parameters removed.
  std::string bare = with(ones, zeros);
  const std::string keys[] = {"weight = \"ln.weight\"\n", "bias = \"ln.bias\"\n"};
  for (const std::string& line : keys) {
    const std::size_t at = bare.find(line);
    REQUIRE(at != std::string::npos);
    bare.erase(at, line.size());
  }
  const std::size_t params = bare.find("[[tensors]]\nname = \"ln.weight\"");
  REQUIRE(params != std::string::npos);
  bare.erase(params, bare.find("[[steps]]") - params);
  CHECK_THAT(refusal(with_fault(bare, "ones_init_assumed"), "bare.toml"),
             Catch::Contains("here there is none"));
}
