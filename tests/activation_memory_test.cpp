// Activation-memory accounting: the bytes each rank keeps from forward for backward, for the
// same MLP block with and without sequence parallelism. The LayerNorm input/statistics and the
// dropout mask are what sequence parallelism shards; everything else is the same.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "compare/compare.hpp"
#include "core/io.hpp"
#include "report/report.hpp"
#include "scenario/scenario.hpp"

using shardsim::ActivationMemory;
using shardsim::RunReport;

namespace {

std::string path(const std::string& name) {
  return std::string(SHARDSIM_SOURCE_DIR) + "/scenarios/" + name;
}

RunReport run(const shardsim::Scenario& s, const char* precision) {
  return shardsim::evaluate(s, shardsim::parse_precision(precision));
}

std::vector<std::int64_t> step_bytes(const ActivationMemory& m, const std::string& output) {
  for (const auto& share : m.steps) {
    if (share.output == output) return share.bytes;
  }
  FAIL("no activation entry for " << output);
  return {};
}

// The scenario with its 13 tokens replaced by `seq`.
shardsim::Scenario with_seq(const std::string& name, int seq) {
  std::string text = shardsim::read_file(path(name));
  const std::string from = "shape = [2, 13, 16]";
  for (std::size_t at = text.find(from); at != std::string::npos; at = text.find(from, at)) {
    text.replace(at, from.size(), "shape = [2, " + std::to_string(seq) + ", 16]");
  }
  return shardsim::parse_scenario(text, name);
}

}  // namespace

// Hand derivation, batch b = 2, hidden h = 16, ffn f = 32 (8 per rank), s = 13 tokens split
// 4, 4, 4, 1 (c_r tokens on rank r) with sequence parallelism. Elements kept per rank:
//   layer_norm  input x + mean + rstd: b c h + 2 b c = 36 c      (SP: c = c_r; TP: c = 13)
//   fc1 linear  its input, the all-gathered ln: b s h = 416       (both)
//   gelu        its input h, [b, s, f/4]: 208                     (both)
//   fc2 linear  its input a: 208                                  (both)
//   dropout     the mask, 1 byte per element: b c h = 32 c bytes  (SP: c = c_r; TP: c = 13)
// At f32 (4 bytes per activation element):
//   SP rank 0-2: (144 + 416 + 208 + 208) * 4 + 128 = 4032;  rank 3: (36 + 832) * 4 + 32 = 3504
//   TP every rank: (468 + 832) * 4 + 416 = 5616
// At f64 the activation elements count 8 bytes: SP 7936 / 6976, TP 10816.
TEST_CASE("activation bytes per rank with and without sequence parallelism", "[activation]") {
  const auto sp = shardsim::load_scenario(path("mlp_sequence_parallel.toml"));
  const auto tp = shardsim::load_scenario(path("mlp_tensor_parallel.toml"));
  CHECK(run(sp, "f32").activation.per_rank == std::vector<std::int64_t>{4032, 4032, 4032, 3504});
  CHECK(run(tp, "f32").activation.per_rank == std::vector<std::int64_t>{5616, 5616, 5616, 5616});
  const RunReport sp64 = run(sp, "f64");
  const RunReport tp64 = run(tp, "f64");
  CHECK(sp64.activation.per_rank == std::vector<std::int64_t>{7936, 7936, 7936, 6976});
  CHECK(tp64.activation.per_rank == std::vector<std::int64_t>{10816, 10816, 10816, 10816});
  // Per step: only the LayerNorm and the dropout differ.
  CHECK(step_bytes(sp64.activation, "ln") == std::vector<std::int64_t>{1152, 1152, 1152, 288});
  CHECK(step_bytes(tp64.activation, "ln") == std::vector<std::int64_t>{3744, 3744, 3744, 3744});
  CHECK(step_bytes(sp64.activation, "d") == std::vector<std::int64_t>{128, 128, 128, 32});
  CHECK(step_bytes(tp64.activation, "d") == std::vector<std::int64_t>{416, 416, 416, 416});
  for (const char* output : {"h", "a", "o"}) {
    INFO(output);
    CHECK(step_bytes(sp64.activation, output) == step_bytes(tp64.activation, output));
  }
  // The saving is per rank exactly the LN + dropout share the rank no longer holds: rank 0
  // holds 4 of 13 tokens, so it saves 9/13 of (3744 + 416) = 2880 bytes.
  CHECK(tp64.activation.per_rank[0] - sp64.activation.per_rank[0] == 2880);
}

TEST_CASE("with tokens that divide, SP shards the LN and dropout activations by the group size",
          "[activation]") {
  // s = 16 over 4 ranks: every rank holds 4 tokens, so the LayerNorm bytes 36 * 4 * 8 = 1152 and
  // the mask 32 * 4 = 128 are exactly 1/4 of TP's 36 * 16 * 8 = 4608 and 32 * 16 = 512.
  const RunReport sp = run(with_seq("mlp_sequence_parallel.toml", 16), "f64");
  const RunReport tp = run(with_seq("mlp_tensor_parallel.toml", 16), "f64");
  REQUIRE(sp.pass);
  REQUIRE(tp.pass);
  for (const char* output : {"ln", "d"}) {
    INFO(output);
    const auto sharded = step_bytes(sp.activation, output);
    const auto replicated = step_bytes(tp.activation, output);
    for (std::size_t r = 0; r < 4; ++r) CHECK(sharded[r] * 4 == replicated[r]);
  }
  CHECK(step_bytes(tp.activation, "ln")[0] == 4608);
  CHECK(step_bytes(tp.activation, "d")[0] == 512);
}

TEST_CASE("the report carries activation_bytes per rank and per step", "[activation][report]") {
  const auto sp = shardsim::load_scenario(path("mlp_sequence_parallel.toml"));
  std::vector<RunReport> runs{run(sp, "f64")};
  const auto json = nlohmann::json::parse(shardsim::report_json(sp, runs, shardsim::judge(sp, runs)));
  const auto& r = json["runs"][0];
  CHECK(r["activation_bytes"] == nlohmann::json::array({7936, 7936, 7936, 6976}));
  CHECK(r["activation_steps"][0]["op"] == "layer_norm");
  CHECK(r["activation_steps"][0]["bytes"] == nlohmann::json::array({1152, 1152, 1152, 288}));
  CHECK(shardsim::format_run_table(runs[0]).find(
            "activation memory kept for backward, bytes per rank: 7936 7936 7936 6976 "
            "(total 30784)") != std::string::npos);
}
