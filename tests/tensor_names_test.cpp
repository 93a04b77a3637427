// Tensor names a scenario may not take (sim/scenario/names.cpp): the names the runner builds from
// scenario names (grad(NAME), NAME.PART, NAME@WHERE, the goldens' NAME@rankR[...] and NAME#K) and
// the ones it uses of its own. Before the check, an output named grad(w) silently replaced w's
// gradient (the run passed with different trained weights), a tensor named d.mask next to a
// dropout output d made a clean scenario diverge, and others aborted or hit internal errors.
// That every name the runner records for the bundled scenarios is covered by the check is
// tests/boundary_contract_test.cpp.
#include <catch2/catch.hpp>
#include <string>

#include "cli_test_support.hpp"
#include "scenario_test_support.hpp"
#include "core/error.hpp"
#include "scenario/scenario.hpp"

using namespace cli_test;

namespace {

using scenario_test::load_error;

// kTiny (cli_test_support.hpp: line 8 the tensor's name, 16 the step's output) and a gelu after
// its LayerNorm (lines 19-21: op, input, output).
std::string two_steps(const std::string& output) {
  return std::string(kTiny) + "\n[[steps]]\nop = \"gelu\"\ninput = \"y\"\noutput = \"" + output +
         "\"\n";
}

}  // namespace

TEST_CASE("tensor names: characters the runner builds names with are refused where they appear",
          "[scenario][names]") {
  // grad(x): the gradient's name (an output so named replaced it). x@rank0[seq=0:2]: a golden's
  // shard name. y#1: the goldens' second tensor of one name. A space: not spellable in
  // placements and golden paths.
  CHECK_THAT(load_error(replaced(kTiny, "output = \"y\"", "output = \"grad(x)\"")),
             Catch::StartsWith("s.toml:16:10: steps[0].output: tensor name 'grad(x)' uses '('"));
  CHECK_THAT(load_error(two_steps("x@rank0[seq=0:2]")),
             Catch::StartsWith("s.toml:21:10: steps[1].output: tensor name 'x@rank0[seq=0:2]' "
                               "uses '@'"));
  CHECK_THAT(load_error(two_steps("y#1")),
             Catch::StartsWith("s.toml:21:10: steps[1].output: tensor "
                               "name 'y#1' uses '#'"));
  CHECK_THAT(load_error(replaced(replaced(kTiny, "name = \"x\"", "name = \"x 1\""), "input = \"x\"",
                                 "input = \"x 1\"")),
             Catch::StartsWith("s.toml:8:8: tensors[0].name: tensor name 'x 1' uses 'a space or "
                               "control character'"));
  CHECK_THAT(load_error(two_steps("y\u00e9")),
             Catch::Contains("tensor name 'y\u00e9' uses 'a non-ASCII character'"));
  CHECK_THAT(load_error(two_steps("")),
             Catch::StartsWith("s.toml:21:10: steps[1].output: tensor name must not be empty"));
}

TEST_CASE("tensor names: the runner's own names and an owner's parts are refused, either order",
          "[scenario][names]") {
  // grad_norm (clip_grad_norm's global norm) and flat_param.* (FSDP's flat parameters).
  CHECK_THAT(
      load_error(two_steps("grad_norm")),
      Catch::StartsWith("s.toml:21:10: steps[1].output: tensor name 'grad_norm' is reserved"));
  CHECK_THAT(load_error(two_steps("flat_param.y")), Catch::Contains("'flat_param.y' is reserved"));
  // y.mean after the LayerNorm whose output y owns the part 'mean' (its saved mean).
  CHECK_THAT(load_error(two_steps("y.mean")),
             Catch::StartsWith("s.toml:21:10: steps[1].output: tensor name 'y.mean' is the name of "
                               "the part 'mean' that the runner records for 'y'"));
  // The other order: a declared tensor y.rstd first, then the LayerNorm output y (refused at y,
  // the later name). mask@repetition: dropout's repetition check of an output d.
  const std::string rstd_first =
      replaced(kTiny, "[[steps]]",
               "[[tensors]]\nname = \"y.rstd\"\naxes = [\"batch\"]\nshape = [2]\n\n[[steps]]");
  CHECK_THAT(load_error(rstd_first), Catch::StartsWith("s.toml:21:10: steps[0].output: tensor name "
                                                       "'y.rstd' is the name of the part 'rstd'"));
  CHECK_THAT(load_error(two_steps("y.attn")), Catch::Contains("the part 'attn'"));
  CHECK_THAT(load_error(two_steps("y.mask")), Catch::Contains("the part 'mask'"));
}

TEST_CASE("tensor names: dotted names that are no part of their owner load", "[scenario][names]") {
  // Module-style names (ln.weight beside an output ln, as captured PyTorch programs name them),
  // and an owner's names with a suffix the runner never records.
  CHECK(load_error(two_steps("y.act")).empty());
  CHECK(load_error(two_steps("y.meanish")).empty());
  CHECK(load_error(two_steps("x.full")).empty());
  CHECK(load_error(two_steps("y-1")).empty());
  // A part's own dotted extension is no name the runner builds (it appends to a part only with
  // '@'): a module attn's submodule q has parameters attn.q.weight.
  CHECK(load_error(two_steps("y.mask.1")).empty());
  CHECK(load_error(two_steps("y.q.weight")).empty());
}

TEST_CASE("tensor names: a refused name is bad input from the CLI, with nothing written",
          "[scenario][names][cli]") {
  TempDir dir;
  const fs::path scenario =
      dir.write("s.toml", replaced(kTiny, "output = \"y\"", "output = \"grad(x)\""));
  const CliResult r = run_cli("run " + q(scenario) + " --report " + q(dir.path() / "r.json") +
                              " --golden " + q(dir.path() / "golden"));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::StartsWith("shardsim: error: " + scenario.string() +
                                      ":16:10: steps[0].output: tensor name 'grad(x)' uses '('"));
  CHECK(r.out.empty());
  CHECK(entries(dir.path()) == std::vector<std::string>{"s.toml"});
}
