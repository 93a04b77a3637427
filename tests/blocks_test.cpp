// Tests for [blocks] (sim/scenario/loader_blocks.cpp, docs/scenario-format.md "Blocks"): a block
// written once and instantiated as layers expands to the steps and tensors one would write by
// hand, in order, with {layer}, {input} and {output} substituted; its errors are located at the
// block's lines. The bundled scenarios/lm_blocks_sp_dp2_tp2.toml runs in the replay of
// scenarios/ ([expect]).
#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "scenario/scenario.hpp"
#include "scenario_test_support.hpp"

using scenario_test::load_error;
using shardsim::parse_scenario;
using shardsim::Scenario;

namespace {

const std::string kHead = R"toml(
name = "b"
precisions = ["f64"]
train_steps = 1
[mesh]
dims = { tp = 2 }
[[tensors]]
name = "x"
axes = ["batch", "seq", "hidden"]
shape = [1, 4, 6]
init = { dist = "normal", mean = 0.0, std = 1.0 }
[[tensors]]
name = "t"
role = "target"
axes = ["batch", "seq", "hidden"]
shape = [1, 4, 6]
init = { dist = "normal", mean = 0.0, std = 1.0 }
)toml";

// A layer of two steps: RMSNorm with its own weight, then the residual add of its input.
const std::string kBlock = R"toml(
[blocks.norm_res]
output = "l{layer}.out"
[[blocks.norm_res.tensors]]
name = "l{layer}.w"
role = "parameter"
axes = ["hidden"]
shape = [6]
init = { dist = "uniform", low = 0.5, high = 1.5 }
[[blocks.norm_res.steps]]
op = "rms_norm"
input = "{input}"
weight = "l{layer}.w"
output = "l{layer}.n"
[[blocks.norm_res.steps]]
op = "add"
input = "l{layer}.n"
residual = "{input}"
output = "{output}"
)toml";

std::string use(const std::string& keys) {
  return "[[steps]]\n" + keys +
         "\n[[steps]]\nop = \"mse_loss\"\ninput = \"y\"\ntarget = \"t\"\noutput = \"loss\"\n";
}

// "op input residual|weight output" per step.
std::vector<std::string> step_lines(const Scenario& s) {
  std::vector<std::string> out;
  for (const shardsim::StepSpec& step : s.steps) {
    std::string line(step.op());
    for (const char* key : {"input", "weight", "residual", "output"}) {
      const auto it = step.params.find(key);
      if (it == step.params.end()) continue;
      line += " " + std::get<std::string>(it->second.value);
    }
    out.push_back(line);
  }
  return out;
}

}  // namespace

TEST_CASE("blocks: three layers expand to the steps written by hand", "[blocks][loader]") {
  const Scenario s = parse_scenario(
      kHead + kBlock + use("block = \"norm_res\"\nrepeat = 3\ninput = \"x\"\noutput = \"y\""),
      "b.toml");
  // Layer l reads layer l - 1's output (x for layer 0); the last layer writes the use's output.
  const std::vector<std::string> expected{
      "rms_norm x l0.w l0.n",   "add l0.n x l0.out",         "rms_norm l0.out l1.w l1.n",
      "add l1.n l0.out l1.out", "rms_norm l1.out l2.w l2.n", "add l2.n l1.out y",
      "mse_loss y loss"};
  CHECK(step_lines(s) == expected);
  std::vector<std::string> params;
  for (const shardsim::TensorSpec& t : s.tensors) {
    if (t.role == shardsim::TensorRole::parameter) params.push_back(t.name);
  }
  CHECK(params == std::vector<std::string>{"l0.w", "l1.w", "l2.w"});
  // Each layer's weight is its own draw: the seed mixes in the tensor's name.
  CHECK(s.find_tensor("l0.w")->init_seed != s.find_tensor("l1.w")->init_seed);
}

TEST_CASE("blocks: first_layer numbers the layers, repeat = 1 writes the use's output",
          "[blocks][loader]") {
  const Scenario s = parse_scenario(
      kHead + kBlock +
          use("block = \"norm_res\"\nrepeat = 1\nfirst_layer = 7\ninput = \"x\"\noutput = \"y\""),
      "b.toml");
  CHECK(step_lines(s) == std::vector<std::string>{"rms_norm x l7.w l7.n", "add l7.n x y",
                                                  "mse_loss y loss"});
}

TEST_CASE("blocks: the bundled 2-layer model becomes 4 layers by one number", "[blocks][loader]") {
  std::ifstream in(std::string(SHARDSIM_SOURCE_DIR) + "/scenarios/lm_blocks_sp_dp2_tp2.toml");
  std::stringstream text;
  text << in.rdbuf();
  std::string four = text.str();
  const Scenario two = parse_scenario(four, "lm.toml");
  four.replace(four.find("\nrepeat = 2\n"), 12, "\nrepeat = 4\n");
  const Scenario deep = parse_scenario(four, "lm.toml");
  // 5 steps outside the block, 8 per layer; 2 parameters outside, 4 per layer.
  CHECK(two.steps.size() == 5 + 2 * 8);
  CHECK(deep.steps.size() == 5 + 4 * 8);
  CHECK(deep.tensors.size() == 2 + 4 * 4);
  CHECK(deep.find_tensor("layers.3.mlp.down.weight") != nullptr);
  CHECK(step_lines(deep)[1 + 3 * 8] == "rms_norm layers.2.out layers.3.norm.weight layers.3.xn");
}

TEST_CASE("blocks: bad blocks and uses are located errors", "[blocks][loader]") {
  const auto error = [](const std::string& block, const std::string& keys) {
    return load_error(kHead + block + use(keys), "b.toml");
  };
  const std::string ok_use = "block = \"norm_res\"\nrepeat = 2\ninput = \"x\"\noutput = \"y\"";
  CHECK_THAT(error(kBlock, "block = \"norm_re\"\nrepeat = 2\ninput = \"x\"\noutput = \"y\""),
             Catch::Contains("steps[0].block: no block 'norm_re' in [blocks] (did you mean "
                             "'norm_res'?)"));
  CHECK_THAT(error(kBlock, "block = \"norm_res\"\nrepeat = 0\ninput = \"x\"\noutput = \"y\""),
             Catch::Contains("steps[0].repeat: repeat is in [1, 1000]"));
  CHECK_THAT(error(kBlock, "block = \"norm_res\"\nrepeat = 2\ninput = \"x\""),
             Catch::Contains("missing required key 'output'"));
  CHECK_THAT(error(kBlock, ok_use + "\nop = \"add\""), Catch::Contains("unknown key 'op'"));

  std::string placeholder = kBlock;
  placeholder.replace(placeholder.find("l{layer}.n\"\n[[blocks"), 10, "l{layr}.n");
  const std::string unknown = error(placeholder, ok_use);
  // Located at the block's own line: the rms_norm step's `output`, line 31 of the text (kHead
  // spans lines 1-17, kBlock starts at 18).
  CHECK_THAT(unknown, Catch::Contains("unknown placeholder '{layr}' in a block"));
  CHECK_THAT(unknown, Catch::StartsWith("b.toml:31:"));

  std::string no_layer = kBlock;
  no_layer.replace(no_layer.find("l{layer}.out"), 12, "l.out");
  CHECK_THAT(error(no_layer, ok_use), Catch::Contains("blocks.norm_res.output: a block's output "
                                                      "names each layer's result: it must "
                                                      "contain {layer}"));

  CHECK_THAT(load_error(kHead + kBlock + use("op = \"add\"\ninput = \"x\"\nresidual = \"x\"\n"
                                                "output = \"y\""),
                        "b.toml"),
             Catch::Contains("blocks.norm_res: block 'norm_res' is defined but no [[steps]] "
                             "entry instantiates it"));

  std::string nested = kBlock + "[[blocks.norm_res.steps]]\nblock = \"norm_res\"\n";
  CHECK_THAT(error(nested, ok_use), Catch::Contains("cannot instantiate another block"));

  // A tensor without {layer} in its name is declared once per layer: the second is a duplicate,
  // located at the block's line.
  std::string shared = kBlock;
  for (const std::string from : {"name = \"l{layer}.w\"", "weight = \"l{layer}.w\""}) {
    shared.replace(shared.find(from), from.size(), from.substr(0, from.find('"')) + "\"w\"");
  }
  CHECK_THAT(error(shared, ok_use), Catch::Contains("duplicate tensor name 'w'"));
}
