// Gradient accumulation over micro-batches (micro_batches = k, docs/layouts.md "Micro-batches and
// gradient accumulation"): the torch.chunk split, the loss weights of the correct program and of
// the micro_batch_mean fault derived by hand, the accumulated gradient against the whole batch's
// (bitwise where the summation order is the same, else a derived bound), the N-D mesh, the
// micro-batch labels in trace and report, and the located refusals of bad input.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_test_support.hpp"
#include "compare/compare.hpp"
#include "core/error.hpp"
#include "report/report.hpp"
#include "scenario/scenario.hpp"

namespace {

namespace fs = std::filesystem;

// One rank, everything Replicate: the sharded program is the dense arithmetic, so the only
// difference between the two is the accumulation. Batch 2, seq 3: valid_lengths [3, 1] gives
// micro-batch 1 (row 0) 3 valid tokens and micro-batch 2 (row 1) 1 valid token, V = 4.
const std::string kOne = R"toml(name = "one"
precisions = ["f64"]
train_steps = 1
micro_batches = 2

[mesh]
ranks = 1

[[tensors]]
name = "x"
axes = ["batch", "seq", "hidden"]
shape = [2, 3, 4]
init = { dist = "normal", mean = 0.5, std = 2.0 }

[[tensors]]
name = "target"
role = "target"
axes = ["batch", "seq", "hidden"]
shape = [2, 3, 4]

[[tensors]]
name = "ln.weight"
role = "parameter"
axes = ["hidden"]
shape = [4]
init = { dist = "uniform", low = 0.5, high = 1.5 }

[[tensors]]
name = "ln.bias"
role = "parameter"
axes = ["hidden"]
shape = [4]

[[steps]]
op = "layer_norm"
input = "x"
weight = "ln.weight"
bias = "ln.bias"
output = "y"

[[steps]]
op = "mse_loss"
input = "y"
target = "target"
output = "loss"
valid_lengths = [3, 1]
)toml";

std::string edited(std::string text, const std::string& from, const std::string& to) {
  const std::size_t at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

shardsim::RunReport run(const std::string& text, const char* precision) {
  shardsim::RunOptions options;
  options.capture_tensors = true;
  return shardsim::evaluate(shardsim::parse_scenario(text, "s.toml"),
                            shardsim::parse_precision(precision), options);
}

// The boundary `op -> tensor` of micro-batch `micro` at step 1.
const shardsim::BoundaryResult& at(const shardsim::RunReport& r, int micro, const std::string& op,
                                   const std::string& tensor) {
  for (const shardsim::BoundaryResult& b : r.boundaries) {
    if (b.entry.step == 1 && b.entry.micro == micro && b.entry.op == op &&
        b.entry.tensor == tensor) {
      return b;
    }
  }
  FAIL("no boundary " << op << " -> " << tensor << " in micro-batch " << micro);
  return r.boundaries.front();
}

const std::vector<double>& sharded(const shardsim::BoundaryResult& b) {
  return b.captured->ranks.at(0).f64;
}

// parse_scenario throws an InputError "s.toml:LINE:COL: PATH: ..." containing `what`.
void expect_error(const std::string& text, const std::string& path, const std::string& what) {
  try {
    shardsim::parse_scenario(text, "s.toml");
    FAIL("expected an InputError at " << path);
  } catch (const shardsim::InputError& e) {
    const std::string message = e.what();
    INFO(message);
    CHECK(message.rfind("s.toml:", 0) == 0);
    CHECK(message.find(": " + path + ": ") != std::string::npos);
    CHECK(message.find(what) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("micro-batch rows are torch.chunk of the batch", "[micro]") {
  // c = ceil(rows / k); the last micro-batch may be short.
  CHECK(shardsim::micro_batch_rows(5, 2) == std::vector<std::int64_t>{3, 2});
  CHECK(shardsim::micro_batch_rows(5, 3) == std::vector<std::int64_t>{2, 2, 1});
  CHECK(shardsim::micro_batch_rows(4, 4) == std::vector<std::int64_t>{1, 1, 1, 1});
  CHECK(shardsim::micro_batch_rows(7, 1) == std::vector<std::int64_t>{7});
}

TEST_CASE(
    "micro-batches of 3 and 1 valid tokens: every token weighs 1/4, the per-micro-batch "
    "mean weighs 1/6 and 1/2",
    "[micro]") {
  // The correct program divides each micro-batch's sum by the step's V = 3 + 1 = 4, so every
  // valid token's gradient is 2 (y - t) / 4. micro_batch_mean divides by k V_j: micro-batch 1's
  // tokens get 2 (y - t) / (2 * 3) = 2 (y - t) / 6, micro-batch 2's token 2 (y - t) / (2 * 1).
  // So faulty / correct = 4/6 = 2/3 on micro-batch 1's tokens and 4/2 = 2 on micro-batch 2's,
  // and the same ratios hold for each micro-batch's loss (S_j / 6 against S_j / 4, S_j / 2
  // against S_j / 4). Padding tokens get 0 in both. Each value is one correctly rounded
  // quotient of the same 2 (y - t) (y and t are bitwise equal in both runs: the fault changes
  // nothing before the loss), so the ratio of the two is exact to (1 + u)^2 / (1 - u)... : within
  // 4 u = 2^-51 relative.
  const shardsim::RunReport clean = run(kOne, "f64");
  const shardsim::RunReport faulty =
      run(edited(kOne, "micro_batches = 2", "micro_batches = 2\nfaults = [\"micro_batch_mean\"]"),
          "f64");
  CHECK(clean.pass);
  REQUIRE(faulty.first_divergence);
  CHECK(faulty.first_divergence->micro == 1);
  CHECK(faulty.first_divergence->tensor == "loss");
  const double ratio[2] = {2.0 / 3.0, 2.0};
  const std::int64_t valid_tokens[2] = {3, 1};  // of the 3 tokens of the micro-batch's one row
  for (int micro = 1; micro <= 2; ++micro) {
    INFO("micro-batch " << micro);
    const double expected = ratio[micro - 1];
    const auto& c = at(clean, micro, "mse_loss_backward", "grad(y)");
    const auto& f = at(faulty, micro, "mse_loss_backward", "grad(y)");
    CHECK(c.status == shardsim::Status::exact);  // the whole-batch oracle's rows, bitwise
    REQUIRE(sharded(c).size() == 12);            // [batch=1, seq=3, hidden=4]
    for (std::size_t i = 0; i < sharded(c).size(); ++i) {
      const std::int64_t s = static_cast<std::int64_t>(i) / 4;
      if (s >= valid_tokens[micro - 1]) {
        CHECK(sharded(c)[i] == 0.0);
        CHECK(sharded(f)[i] == 0.0);
        continue;
      }
      REQUIRE(sharded(c)[i] != 0.0);
      CHECK(std::fabs(sharded(f)[i] / sharded(c)[i] - expected) <= expected * 0x1p-51);
    }
    const double loss_ratio = sharded(at(faulty, micro, "mse_loss", "loss"))[0] /
                              sharded(at(clean, micro, "mse_loss", "loss"))[0];
    CHECK(std::fabs(loss_ratio - expected) <= expected * 0x1p-51);
  }
}

TEST_CASE(
    "with equal valid counts per micro-batch micro_batch_mean is the correct program "
    "bit for bit",
    "[micro]") {
  // valid_lengths [2, 2]: V = 4, k V_j = 2 * 2 = 4 for both micro-batches, the same divisor.
  const std::string even = edited(kOne, "valid_lengths = [3, 1]", "valid_lengths = [2, 2]");
  const shardsim::RunReport r =
      run(edited(even, "micro_batches = 2", "micro_batches = 2\nfaults = [\"micro_batch_mean\"]"),
          "f64");
  CHECK(r.pass);
}

TEST_CASE(
    "the accumulated gradient is the whole batch's bit for bit when the last micro-batch "
    "adds one token",
    "[micro]") {
  // LayerNorm's backward adds each token's dy (and dy * norm) into grad(bias) (grad(weight)) in
  // row order, from 0. The whole batch sums tokens t1, t2, t3 (row 0), then t4 (row 1) and two
  // padding tokens whose dy is exactly 0: ((((0 + t1) + t2) + t3) + t4) + 0 + 0. Micro-batch 1
  // gives S1 = ((0 + t1) + t2) + t3, micro-batch 2 gives S2 = ((0 + t4) + 0) + 0 = t4 exactly,
  // and the accumulation S1 + S2 is the same last addition. So every precision is bitwise.
  for (const char* level : {"f32", "f64"}) {
    INFO(level);
    const shardsim::RunReport r = run(kOne, level);
    CHECK(r.pass);
    for (const std::string grad : {"grad(ln.weight)", "grad(ln.bias)"}) {
      INFO(grad);
      CHECK(at(r, 2, "accumulated", grad).status == shardsim::Status::exact);
    }
    CHECK(at(r, 2, "sgd", "ln.bias").status == shardsim::Status::exact);
  }
}

TEST_CASE(
    "with several tokens per micro-batch the accumulated gradient is within the "
    "reassociation bound",
    "[micro]") {
  // Batch 3 in micro-batches of one row each, every token valid: grad(bias)[h] sums n = 9 terms
  // dy[t, h]. The whole batch adds them in one sequence; accumulation adds three row sums. Both
  // are sums of the same 9 terms in two orders, each within (n - 1) u sum |dy| of the exact sum
  // (Higham, Accuracy and Stability, (4.4)), so they differ by at most 2 (n - 1) u sum_t |dy[t, h]|
  // with u = 2^-24 in f32. The |dy| come from the grad(y) boundaries, the whole-batch oracle's
  // rows.
  std::string text = edited(kOne, "shape = [2, 3, 4]", "shape = [3, 3, 4]");
  text = edited(text, "shape = [2, 3, 4]", "shape = [3, 3, 4]");
  text = edited(text, "micro_batches = 2", "micro_batches = 3");
  text = edited(text, "valid_lengths = [3, 1]", "valid_lengths = [3, 3, 3]");
  const shardsim::RunReport r = run(text, "f32");
  CHECK(r.pass);
  std::vector<double> abs_sum(4, 0.0);
  for (int micro = 1; micro <= 3; ++micro) {
    const auto& dy = at(r, micro, "mse_loss_backward", "grad(y)").captured->dense.f64;
    for (std::size_t i = 0; i < dy.size(); ++i) abs_sum[i % 4] += std::fabs(dy[i]);
  }
  const auto& acc = at(r, 3, "accumulated", "grad(ln.bias)");
  for (std::size_t h = 0; h < 4; ++h) {
    const double bound = 2 * 8 * 0x1p-24 * abs_sum[h];
    CHECK(std::fabs(acc.captured->ranks[0].f64[h] - acc.captured->dense.f64[h]) <= bound);
  }
}

TEST_CASE("micro_batch_mean on the dp x tp mesh first diverges at micro-batch 1's loss",
          "[micro]") {
  // The bundled scenario: micro-batches of 26 and 13 valid tokens (39 in the step), so the
  // faulty micro-batch 1 divides by 2 * 26 = 52 instead of 39.
  const fs::path path =
      fs::path(SHARDSIM_SOURCE_DIR) / "scenarios" / "micro_batches_dp_tp_mlp.toml";
  const std::string text = cli_test::slurp(path);
  const shardsim::RunReport clean = run(text, "f64");
  CHECK(clean.pass);
  for (const std::string tensor : {"loss.valid_tokens", "loss.step_valid_tokens"}) {
    // counts of whole tokens: bitwise, and 26, then the step's 39
    const auto& b = at(clean, 1, "all_reduce[tp]", tensor);
    CHECK(b.status == shardsim::Status::exact);
    CHECK(sharded(b)[0] == (tensor == "loss.valid_tokens" ? 26.0 : 39.0));
  }
  const shardsim::RunReport faulty =
      run(edited(text, "\nmicro_batches = 2\n",
                 "\nmicro_batches = 2\nfaults = [\"micro_batch_mean\"]\n"),
          "f64");
  REQUIRE(faulty.first_divergence);
  CHECK(faulty.first_divergence->micro == 1);
  CHECK(faulty.first_divergence->tensor == "loss");
  const double ratio =
      sharded(at(faulty, 1, "mse_loss", "loss"))[0] / sharded(at(clean, 1, "mse_loss", "loss"))[0];
  CHECK(std::fabs(ratio - 39.0 / 52.0) <= 0x1p-40);  // the two sums are equal: same loss.sum
}

TEST_CASE("micro-batch boundaries are labelled in the trace, the report and the goldens' names",
          "[micro]") {
  const shardsim::Scenario scenario = shardsim::parse_scenario(kOne, "s.toml");
  const shardsim::RunReport r = shardsim::evaluate(scenario, shardsim::parse_precision("f64"));
  std::map<int, int> per_micro;
  for (const shardsim::BoundaryResult& b : r.boundaries) {
    CHECK(b.entry.micro_count == 2);
    ++per_micro[b.entry.micro];
  }
  CHECK(per_micro.size() == 3);  // 0: the tensors as loaded; then micro-batches 1 and 2
  const shardsim::BoundaryResult& y = at(r, 2, "layer_norm", "y");
  CHECK(y.entry.global.extent("batch") == 1);
  CHECK(shardsim::format_entry(y.entry).find("step 1 micro 2/2 chunk 1  layer_norm -> y") !=
        std::string::npos);
  const shardsim::Outcome outcome = shardsim::judge(scenario, {r});
  const auto json = nlohmann::json::parse(shardsim::report_json(scenario, {r}, outcome));
  CHECK(json["runs"][0]["boundaries"][static_cast<std::size_t>(y.entry.id)]["micro"] == 2);
  // Without micro-batches there is no "micro" key at all (reports stay byte-identical).
  const std::string whole = edited(kOne, "micro_batches = 2\n", "");
  const shardsim::Scenario plain = shardsim::parse_scenario(whole, "s.toml");
  const shardsim::RunReport p = shardsim::evaluate(plain, shardsim::parse_precision("f64"));
  const auto plain_json =
      nlohmann::json::parse(shardsim::report_json(plain, {p}, shardsim::judge(plain, {p})));
  CHECK_FALSE(plain_json["runs"][0]["boundaries"][0].contains("micro"));
  // micro_batches = 1 is the run without micro-batches.
  const shardsim::Scenario one =
      shardsim::parse_scenario(edited(kOne, "micro_batches = 2", "micro_batches = 1"), "s.toml");
  const shardsim::RunReport o = shardsim::evaluate(one, shardsim::parse_precision("f64"));
  CHECK(shardsim::report_json(one, {o}, shardsim::judge(one, {o})) ==
        shardsim::report_json(plain, {p}, shardsim::judge(plain, {p})));
}

TEST_CASE("bad micro_batches are refused at their key", "[micro]") {
  expect_error(edited(kOne, "micro_batches = 2", "micro_batches = 0"), "micro_batches",
               "micro_batches must be >= 1, got 0");
  expect_error(edited(kOne, "micro_batches = 2", "micro_batches = 3"), "micro_batches",
               "micro_batches = 3 exceeds the batch extent 2 of 'x'");
  // Batch 5 in 4: torch.chunk pieces of 2 give 2, 2, 1 and no fourth micro-batch.
  std::string five = edited(kOne, "shape = [2, 3, 4]", "shape = [5, 3, 4]");
  five = edited(five, "shape = [2, 3, 4]", "shape = [5, 3, 4]");
  five = edited(five, "valid_lengths = [3, 1]", "valid_lengths = [3, 1, 2, 3, 3]");
  REQUIRE_NOTHROW(shardsim::parse_scenario(five, "s.toml"));
  expect_error(edited(five, "micro_batches = 2", "micro_batches = 4"), "micro_batches",
               "torch.chunk cuts the batch extent 5 of 'x' into pieces of 2 rows, which makes "
               "fewer than 4 micro-batches; micro_batches can be 1, 2, 3, 5");
  expect_error(edited(kOne, "micro_batches = 2", "micro_batches = \"2\""), "micro_batches",
               "expected an integer");
  expect_error(kOne + "\n[[tensors]]\nname = \"z\"\naxes = [\"batch\"]\nshape = [3]\n",
               "micro_batches",
               "but 'x' [batch=2, seq=3, hidden=4] and 'z' [batch=3] differ there");
  const std::string dropout =
      edited(kOne, "[[steps]]\nop = \"mse_loss\"\ninput = \"y\"",
             "[[steps]]\nop = \"dropout\"\ninput = \"y\"\noutput = "
             "\"d\"\np = 0.1\n\n[[steps]]\nop = \"mse_loss\"\ninput = \"d\"");
  expect_error(dropout, "micro_batches", "not supported with dropout (steps[1])");
  expect_error(
      edited(kOne, "micro_batches = 2", "micro_batches = 1\nfaults = [\"micro_batch_mean\"]"),
      "faults[0]", "needs micro_batches >= 2 and train_steps");
  expect_error(kOne + "\n[expect]\nverdict = \"fail\"\nmicro = 3\n", "expect.micro",
               "must be in [1, 2]");
  expect_error(kOne + "\n[stream]\naxis = \"seq\"\nchunks = [1, 2]\n", "micro_batches",
               "not supported together with [stream]");
  const std::string over_batch =
      edited(kOne, "weight = \"ln.weight\"\nbias = \"ln.bias\"\noutput = \"y\"\n",
             "output = \"y\"\naxis = \"batch\"\n");
  expect_error(over_batch, "steps[0].axis", "this step reduces over 'batch'");
}

TEST_CASE("the CLI refuses a bad micro_batches with exit 2 and writes nothing", "[micro][cli]") {
  const cli_test::TempDir dir;
  const fs::path scenario =
      dir.write("s.toml", edited(kOne, "micro_batches = 2", "micro_batches = -1"));
  const cli_test::CliResult r = cli_test::run_cli("run " + cli_test::q(scenario) + " --report " +
                                                  cli_test::q(dir.path() / "r.json"));
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("s.toml:4:17: micro_batches: micro_batches must be >= 1, got -1") !=
        std::string::npos);
  CHECK(cli_test::entries(dir.path()) == std::vector<std::string>{"s.toml"});
}

TEST_CASE("golden names put the micro-batch between step and chunk", "[micro][cli]") {
  const cli_test::TempDir dir;
  const fs::path scenario = dir.write("s.toml", kOne);
  const cli_test::CliResult r = cli_test::run_cli("run " + cli_test::q(scenario) + " --golden " +
                                                  cli_test::q(dir.path() / "g"));
  REQUIRE(r.exit_code == 0);
  const auto manifest = nlohmann::json::parse(cli_test::slurp(dir.path() / "g" / "manifest.json"));
  std::map<std::string, int> micro_of;  // tensor name -> its boundary's "micro"
  for (const auto& t : manifest["tensors"]) {
    micro_of[t["name"].get<std::string>()] = t["boundary"].value("micro", -1);
  }
  CHECK(micro_of.at("f64/inputs/x") == 0);  // as loaded, before the micro-batches
  CHECK(micro_of.at("f64/s1/m1/c1/y") == 1);
  CHECK(micro_of.at("f64/s1/m2/c1/y") == 2);
  CHECK(micro_of.at("f64/s1/m2/c1/grad(ln.bias)") == 2);  // the step's update, after micro 2
}
