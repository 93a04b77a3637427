// The diagnosis on the bundled scenarios: every seeded fault in scenarios/faults/ gets the right
// cause ranked first, no clean twin gets a diagnosis, the documented cancellation is rounding,
// and the report and the CLI carry it (diagnosis.hpp, docs/diagnosis.md).
#include <catch2/catch.hpp>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli_test_support.hpp"
#include "dropout_test_support.hpp"
#include "diagnosis/diagnosis.hpp"
#include "report/report.hpp"

using shardsim::Cause;

namespace {

namespace fs = std::filesystem;

struct Replay {
  shardsim::Scenario scenario;
  std::vector<shardsim::RunReport> reports;
  shardsim::Outcome outcome;
};

Replay replay(const fs::path& path) {
  Replay r{shardsim::load_scenario(path.string()), {}, {}};
  for (const shardsim::Precision& p : r.scenario.precisions) {
    r.reports.push_back(shardsim::evaluate(r.scenario, p));
  }
  r.outcome = shardsim::judge(r.scenario, r.reports);
  return r;
}

const fs::path kScenarios = fs::path(SHARDSIM_SOURCE_DIR) / "scenarios";

// Faults the diagnosis does not rank yet, each with the reason; they must not be given a
// cause (a wrong cause is worse than none).
const std::vector<std::pair<std::string, std::string>> kUndiagnosed{
    {"mesh_column_backward_unreduced", "N-D mesh: the signatures read 1-D placements"},
    {"mesh_grad_reduce_mean", "N-D mesh"},
    {"mesh_grad_reduce_wrong_dim", "N-D mesh"},
    {"mesh_row_bias_every_rank", "N-D mesh"},
    {"mesh_gather_wrong_axis", "no signature for buffers concatenated along the wrong axis"},
    {"attention_mask_zigzag_contiguous",
     "zigzag: the position signatures read one offset per shard, a zigzag share has two"},
    {"micro_batch_mean",
     "no loss weighting models micro-batches: none divides a micro-batch's sum by the step's "
     "valid-token count, so the loss signature stands aside on micro-batched runs"},
    {"fsdp_clip_padding", "no signature for padding summed into a norm"}};

}  // namespace

TEST_CASE("every seeded fault's top-ranked cause is the right one", "[diagnosis][scenario]") {
  // The cause each fault's mechanism is (the fault catalogues in docs/ops/ and
  // docs/layouts.md, and each scenario's comment).
  const std::vector<std::pair<std::string, Cause>> expected{
      {"attention_cache_raw_k", Cause::cache_convention},
      {"attention_cache_raw_k_sharded", Cause::cache_convention},
      {"attention_mask_local_query_positions", Cause::position_offset},
      {"attention_ring_backward_local_lse", Cause::softmax_merge},
      {"attention_ring_merge_average", Cause::softmax_merge},
      {"attention_ring_merge_no_max", Cause::softmax_merge},
      {"attention_rope_after_gather_wrong_offset", Cause::position_offset},
      {"attention_rope_local_positions", Cause::position_offset},
      {"attention_window_off_by_one", Cause::position_offset},
      {"dropout_rank_offset", Cause::rank_seed_offset},
      {"dropout_same_seed", Cause::seed_repetition},
      {"fsdp_full_param_step", Cause::unreduced_gradients},
      {"fsdp_grad_averaged", Cause::wrong_divisor},
      {"fsdp_grad_local_mean", Cause::wrong_divisor},
      {"fsdp_reduce_dtype_bf16", Cause::hidden_cast},
      {"fsdp_stale_shard", Cause::wrong_stage},
      {"gqa_kv_grad_unreduced", Cause::unreduced_gradients},
      {"gqa_wrong_group", Cause::head_grouping},
      {"lm_adamw_bias_correction_missing", Cause::optimizer_convention},
      {"lm_adamw_decay_coupled", Cause::optimizer_convention},
      {"lm_ce_local_max", Cause::vocab_reduction},
      {"lm_ce_target_every_rank", Cause::vocab_reduction},
      {"lm_ce_ignored_tokens_counted", Cause::padding_not_masked},
      {"lm_vocab_padding_in_softmax", Cause::padding_not_masked},
      {"lm_embedding_partial_not_reduced", Cause::unreduced_partial},
      {"lm_tied_grad_one_use", Cause::tied_gradient},
      {"norm_average_of_rank_means", Cause::wrong_divisor},
      {"norm_combine_token_means", Cause::normalization_convention},
      {"norm_dtype_mismatch", Cause::hidden_cast},
      {"norm_eps_mismatch", Cause::normalization_convention},
      {"norm_hidden_shard_local_stats", Cause::normalization_convention},
      {"norm_loss_averaged_twice", Cause::wrong_divisor},
      {"norm_ones_init_assumed", Cause::default_value},
      {"norm_padding_in_loss", Cause::padding_not_masked},
      {"norm_rmsnorm_substituted", Cause::normalization_convention},
      {"norm_unbiased_variance", Cause::normalization_convention},
      {"norm_unreduced_param_grads", Cause::unreduced_gradients},
      {"norm_wrong_axis", Cause::axis_order}};
  const std::vector<std::pair<std::string, std::string>>& undiagnosed = kUndiagnosed;
  for (const auto& [name, reason] : undiagnosed) {
    INFO(name << ": " << reason);
    const Replay r = replay(kScenarios / "faults" / (name + ".toml"));
    REQUIRE_FALSE(r.outcome.pass);
    CHECK(shardsim::diagnose(r.scenario, r.reports).causes.empty());
  }
  // Every fault scenario is listed: a new one needs its expected cause here.
  std::size_t faults = 0;
  for (const auto& file : fs::directory_iterator(kScenarios / "faults")) {
    if (!file.path().stem().string().ends_with("_clean")) ++faults;
  }
  CHECK(faults == expected.size() + undiagnosed.size());
  for (const auto& [name, cause] : expected) {
    INFO(name);
    const Replay r = replay(kScenarios / "faults" / (name + ".toml"));
    REQUIRE_FALSE(r.outcome.pass);
    const shardsim::Diagnosis d = shardsim::diagnose(r.scenario, r.reports);
    REQUIRE(d.analysed);
    CHECK(d.boundary == r.outcome.first_divergence->boundary);
    REQUIRE_FALSE(d.causes.empty());
    INFO(shardsim::format_diagnosis(d));
    CHECK(d.causes.front().cause == cause);
    CHECK(d.causes.size() <= shardsim::kMaxCauses);
    for (std::size_t i = 1; i < d.causes.size(); ++i) {
      CHECK(d.causes[i].confidence <= d.causes[i - 1].confidence);
      CHECK(d.causes[i].cause != d.causes.front().cause);
    }
  }
}

TEST_CASE("no clean twin produces a diagnosis", "[diagnosis][scenario]") {
  int twins = 0;
  for (const fs::path& dir : {kScenarios, kScenarios / "faults"}) {
    for (const auto& file : fs::directory_iterator(dir)) {
      if (!file.path().stem().string().ends_with("_clean")) continue;
      INFO(file.path());
      ++twins;
      const Replay r = replay(file.path());
      CHECK(r.outcome.pass);
      CHECK_FALSE(shardsim::diagnose(r.scenario, r.reports).analysed);
      const auto json =
          nlohmann::json::parse(shardsim::report_json(r.scenario, r.reports, r.outcome));
      CHECK_FALSE(json.contains("diagnosis"));
    }
  }
  // 12 normalization, 5 mesh, 1 micro-batch, 6 fsdp and 8 language-model twins in scenarios/,
  // 10 attention and 2 GQA twins in faults/.
  CHECK(twins == 44);
}

TEST_CASE("the documented cancellation is diagnosed as rounding, with a condition estimate",
          "[diagnosis][scenario]") {
  const Replay r = replay(kScenarios / "norm_hidden_cancellation_sum_sumsq.toml");
  const shardsim::Diagnosis d = shardsim::diagnose(r.scenario, r.reports);
  REQUIRE_FALSE(d.causes.empty());
  CHECK(d.causes.front().cause == Cause::rounding);
  // The trend verdict of `shardsim precision` over the same levels, with its condition estimate.
  CHECK(d.causes.front().evidence.find("noise") != std::string::npos);
  CHECK(d.causes.front().evidence.find("; condition 2^") != std::string::npos);
}

TEST_CASE("the report's diagnosis is a list of {cause, confidence, evidence}",
          "[diagnosis][scenario]") {
  const Replay r = replay(kScenarios / "faults" / "norm_loss_averaged_twice.toml");
  const auto json =
      nlohmann::ordered_json::parse(shardsim::report_json(r.scenario, r.reports, r.outcome));
  REQUIRE(json.contains("diagnosis"));
  const auto& first = json["diagnosis"].at(0);
  std::vector<std::string> keys;
  for (const auto& item : first.items()) keys.push_back(item.key());
  CHECK(keys == std::vector<std::string>{"cause", "confidence", "evidence"});
  CHECK(first["cause"] == "wrong_divisor");
  // The key sits between matches_expectation and runs.
  std::vector<std::string> top;
  for (const auto& item : json.items()) top.push_back(item.key());
  const auto at = std::find(top.begin(), top.end(), "diagnosis");
  REQUIRE(at != top.end());
  CHECK(*(at - 1) == "matches_expectation");
  CHECK(*(at + 1) == "runs");
}

TEST_CASE("run prints the probable causes and explain --diagnose the signature analysis",
          "[diagnosis][cli]") {
  const std::string fault = cli_test::q(kScenarios / "faults" / "norm_unbiased_variance.toml");
  const auto run = cli_test::run_cli("run --quiet " + fault);
  CHECK(run.exit_code == 0);  // the divergence is expected
  CHECK(run.out.find("probable causes:\n  1. normalization_convention (0.95)") !=
        std::string::npos);
  const auto explain = cli_test::run_cli("explain " + fault + " --diagnose");
  CHECK(explain.exit_code == 0);
  CHECK(explain.out.find("signature analysis") != std::string::npos);
  CHECK(explain.out.find("  precision_trend ") != std::string::npos);  // every signature listed
  const auto selected = cli_test::run_cli("explain " + fault + " --diagnose '#5' -p mp256");
  CHECK(selected.out.find("boundary #5 layer_norm -> y (mp256 run)") != std::string::npos);
  const auto missing = cli_test::run_cli("explain " + fault + " --diagnose nowhere");
  CHECK(missing.exit_code == 2);
  CHECK(missing.err.find("no boundary named 'nowhere'") != std::string::npos);
  CHECK(missing.out.empty());  // bad input found by the analysis: the plan is not printed either
  // A boundary number beyond int and an unknown precision are bad input too (exit 2, one line).
  const auto huge = cli_test::run_cli("explain " + fault + " --diagnose 99999999999999999999");
  CHECK(huge.exit_code == 2);
  CHECK(huge.err == "shardsim: error: --diagnose: no boundary #99999999999999999999\n");
  // An explicit empty selector is not the bare flag: refused, nothing printed (`--diagnose=` is
  // refused by the option parser itself).
  const auto blank = cli_test::run_cli("explain " + fault + " --diagnose ''");
  CHECK(blank.exit_code == 2);
  CHECK(blank.err.rfind("shardsim: error: --diagnose: empty boundary selector", 0) == 0);
  CHECK(blank.out.empty());
  const auto equals = cli_test::run_cli("explain " + fault + " --diagnose=");
  CHECK(equals.exit_code == 2);
  CHECK(equals.err.find("'--diagnose' should follow immediately after the equal sign") !=
        std::string::npos);
  CHECK(equals.out.empty());
  const auto level = cli_test::run_cli("explain " + fault + " --diagnose -p mp7");
  CHECK(level.exit_code == 2);
  CHECK(level.err.rfind("shardsim: error: --precision: invalid precision 'mp7'", 0) == 0);
  const auto clean = cli_test::run_cli(
      "explain " + cli_test::q(kScenarios / "layernorm_sequence_sharded.toml") + " --diagnose");
  CHECK(clean.out.find("nothing diverged: nothing to diagnose") != std::string::npos);
}

TEST_CASE("same_seed at 1024 ranks: flagged, diagnosed at f64 (capture cap), k^2 verdict",
          "[diagnosis][scenario]") {
  // x [batch=1, seq=2048, hidden=4] over 1024 ranks (8 elements each), p = 0.1: every rank draws
  // local words 0..7. The verdict [rank=1024, peer=1024] alone is 2^20 values per side, so the
  // run holds more than 2^20 boundary values and the mp levels are not captured.
  const auto scenario =
      shardsim::parse_scenario(dropout_test::same_seed_scenario(1024), "same_seed_1024.toml");
  const std::vector<shardsim::RunReport> reports{
      shardsim::evaluate(scenario, shardsim::parse_precision("f64"))};
  const shardsim::BoundaryResult& check = reports[0].boundaries.at(1);
  REQUIRE(check.entry.op == "dropout_repetition");
  std::int64_t held = 0;
  for (const auto& r : check.entry.ranks) held += r.local_shape.numel();
  CHECK(held == 1024 * 1024);  // one row per rank, not a k x k copy per rank
  const shardsim::Diagnosis d = shardsim::diagnose(scenario, reports);
  REQUIRE_FALSE(d.causes.empty());
  CHECK(d.causes.front().cause == Cause::seed_repetition);
  CHECK(d.precision.name() == "f64");
  // All 1024 ranks draw one stream: every pair is flagged, C(1024, 2) = 523776.
  CHECK(d.causes.front().evidence.find("flags 523776 pairs") != std::string::npos);
}
