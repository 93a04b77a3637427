// Hostile input, round 2: nonsense numbers, init keys, axis names and [expect] names in a
// scenario; non-regular and oversized input files; messages that would echo megabytes; a path
// the filesystem refuses in compare; an allocation that fails. Every case: exit 2, one message
// on stderr that starts "shardsim: error: " and locates the problem, nothing on stdout, nothing
// written.
#include <sys/stat.h>

#include "cli_test_support.hpp"

using namespace cli_test;

namespace {

// The bad-input contract for `shardsim COMMAND FILE ...` run inside a scratch directory.
void expect_refused(const CliResult& r, const std::string& where, const std::string& what) {
  INFO("stderr: " << r.err);
  CHECK(r.exit_code == 2);
  CHECK(r.err.rfind("shardsim: error: " + where, 0) == 0);
  CHECK(r.err.find(what) != std::string::npos);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK(r.out.empty());
}

// Runs the scenario with --report and --golden into a fresh directory and checks the contract,
// the message located at `location` ("LINE:COL: KEY.PATH").
void expect_bad(const std::string& text, const std::string& location, const std::string& what) {
  TempDir dir;
  const fs::path scenario = dir.write("s.toml", text);
  const CliResult r = run_cli("run " + q(scenario) + " --report " + q(dir.path() / "r.json") +
                              " --golden " + q(dir.path() / "golden"));
  expect_refused(r, scenario.string() + ":" + location + ": ", what);
  CHECK(entries(dir.path()) == std::vector<std::string>{"s.toml"});
}

std::string with_init(const std::string& init) {
  return replaced(kTiny, "placement", "init = " + init + "\nplacement");
}

std::string with_step_key(const std::string& line) {
  return replaced(kTiny, "output = \"y\"", "output = \"y\"\n" + line);
}

const std::string kLossTail =
    "\n[[tensors]]\nname = \"t\"\naxes = [\"batch\", \"seq\", \"hidden\"]\nshape = [2, 5, 4]\n"
    "role = \"target\"\nplacement = \"Shard(seq)\"\n\n[[steps]]\nop = \"mse_loss\"\ninput = \"y\"\n"
    "target = \"t\"\noutput = \"loss\"\n";

}  // namespace

TEST_CASE("robustness: init keys the distribution does not use, or no dist, are refused",
          "[robustness]") {
  expect_bad(with_init("{ dist = \"uniform\", std = 2.0 }"), "11:34: tensors[0].init.std",
             "dist = \"uniform\" does not use 'std' (its keys: low, high)");
  expect_bad(with_init("{ dist = \"constant\", low = 0.0, value = 1.0 }"),
             "11:35: tensors[0].init.low",
             "dist = \"constant\" does not use 'low' (its keys: value)");
  expect_bad(with_init("{ dist = \"normal\", value = 1.0 }"), "11:35: tensors[0].init.value",
             "does not use 'value' (its keys: mean, std)");
  expect_bad(with_init("{ low = 0.0, high = 1.0 }"), "11:8: tensors[0].init",
             "init needs dist = \"uniform\"");
  expect_bad(with_init("{ dist = \"constant\" }"), "11:8: tensors[0].init",
             "dist = \"constant\" needs value");
}

TEST_CASE("robustness: non-finite and out-of-range numbers are refused at their key",
          "[robustness]") {
  const std::string f32 = "within the f32 range";
  struct Case {
    std::string text, location, what;
  };
  const std::vector<Case> cases = {
      {with_init("{ dist = \"constant\", value = nan }"), "11:37: tensors[0].init.value",
       "got nan"},
      {with_init("{ dist = \"constant\", value = -inf }"), "11:37: tensors[0].init.value",
       "got -inf"},
      // Finite doubles that are no floats: inputs are drawn as f32 values at every precision.
      {with_init("{ dist = \"constant\", value = 1e39 }"), "11:37: tensors[0].init.value", f32},
      {with_init("{ dist = \"uniform\", low = -1e39, high = 0.0 }"), "11:34: tensors[0].init.low",
       f32},
      {with_init("{ dist = \"normal\", mean = 0.0, std = inf }"), "11:45: tensors[0].init.std",
       "got inf"},
      // mean + 6 std would round to inf as a float.
      {with_init("{ dist = \"normal\", mean = 3e38, std = 1e37 }"), "11:8: tensors[0].init",
       "|mean| + 6 std within the f32 range"},
      {with_step_key("eps = 1e39"), "17:7: steps[0].eps",
       "(the f32 range: f32 runs use float(eps)), got 1e+39"},
      {"learning_rate = inf\ntrain_steps = 1\n" + kTiny + kLossTail, "1:17: learning_rate",
       "got inf"},
      {"learning_rate = 1e39\n" + kTiny + kLossTail, "1:17: learning_rate", "within the f32 range"},
      // Read by nothing without training: refused, not ignored (as clip_grad_norm is).
      {"learning_rate = 0.1\n" + kTiny + kLossTail, "1:17: learning_rate",
       "a learning rate needs train_steps"},
      // Two spellings of one precision: one of the two would go unread (the keys are read in
      // sorted order, so the error names mp256, read after mp0256).
      {kTiny + "\n[tolerance]\nmp256 = 1e-60\nmp0256 = 1e-50\n", "19:9: tolerance.mp256",
       "the tolerance of mp256 is given twice"},
      // An empty name would silently become the file's name.
      {replaced(kTiny, "name = \"tiny\"", "name = \"\""), "1:8: name", "the name is empty"},
      {kTiny + "\n[tolerance]\nf64 = inf\n", "19:7: tolerance.f64", "must be in (0, 1)"},
      {kTiny + "\n[tolerance]\nf64 = 1.0\n", "19:7: tolerance.f64",
       "accepts any value no larger than the oracle's largest), got 1"},
  };
  for (const Case& c : cases) {
    INFO(c.text);
    expect_bad(c.text, c.location, c.what);
  }
  // RoPE's theta: > 0 and a finite float.
  const std::string attention = slurp(source_scenario("attention_stream_cp1.toml"));
  for (const char* theta : {"inf", "0.0", "1e39"}) {
    INFO("rope_theta = " << theta);
    const std::string text =
        replaced(attention, "rope_theta = 10000.0", std::string("rope_theta = ") + theta);
    expect_bad(text, "72:14: steps[0].rope_theta",
               "rope_theta must be in (0, 3.4028234663852886e+38]");
  }
}

TEST_CASE("robustness: a dense oracle that is not finite is bad input naming the boundary",
          "[robustness]") {
  // x = 3e38 everywhere is a valid f32 input, but LayerNorm's row sum (4 x 3e38) overflows at
  // f32: the oracle's y.mean is inf. That is no reference, so no verdict: exit 2, and nothing on
  // stdout although the f64 run before it passed. At f64 alone the scenario runs (and passes).
  std::string text = with_init("{ dist = \"constant\", value = 3e38 }");
  TempDir dir;
  const fs::path scenario = dir.write("s.toml", replaced(text, "[\"f64\"]", "[\"f64\", \"f32\"]"));
  const CliResult r = run_cli("run " + q(scenario) + " --report " + q(dir.path() / "r.json"));
  expect_refused(r,
                 scenario.string() +
                     ": the oracle is not finite at boundary #1 (step 1, chunk 1, "
                     "layer_norm -> y.mean) in the f32 run, first at [batch=0, seq=0]",
                 "overflow or are undefined at this precision");
  CHECK(entries(dir.path()) == std::vector<std::string>{"s.toml"});
  CHECK(run_cli("run --quiet " + q(scenario) + " --precision f64").exit_code == 0);
  // An f16 run (its T is float) names itself: x = 7e4 is above f16's largest finite value 65504,
  // so the stored input is inf already.
  const fs::path f16 = dir.write("h.toml", with_init("{ dist = \"constant\", value = 7e4 }"));
  expect_refused(run_cli("run " + q(f16) + " --precision f16"),
                 f16.string() +
                     ": the oracle is not finite at boundary #0 (step 1, chunk 1, input -> x) "
                     "in the f16 run, first at [batch=0, seq=0, hidden=0]",
                 "overflow or are undefined at this precision");
}

TEST_CASE("robustness: axis names that placements and goldens cannot spell are refused",
          "[robustness]") {
  for (const char* axis : {"", "a b", "seq(1)", "a,b", "x=1"}) {
    INFO("axis '" << axis << "'");
    expect_bad(
        replaced(kTiny, "\"seq\", \"hidden\"]", std::string("\"") + axis + "\", \"hidden\"]"),
        "9:18: tensors[0].axes[1]", "must be non-empty and use only letters, digits and '_'");
  }
  // token_axis without the statistics mode that reads it.
  expect_bad(with_step_key("token_axis = \"batch\""), "17:14: steps[0].token_axis",
             "token_axis is the token axis of stats = \"redistribute\"");
}

TEST_CASE("robustness: [expect] names are checked against the plan, by run and by validate",
          "[robustness]") {
  const std::string base = slurp(source_scenario("faults/norm_unbiased_variance.toml"));
  struct Case {
    std::string from, to, location, what;
  };
  const std::vector<Case> cases = {
      {"tensor = \"y.rstd\"", "tensor = \"y.rstdd\"", "expect.tensor",
       "no boundary of this scenario's plan names tensor 'y.rstdd' at step 1 (did you mean "
       "'y.rstd'?)"},
      {"tensor = \"y.rstd\"\nop = \"layer_norm\"", "tensor = \"y.rstd\"\nop = \"layernorm\"",
       "expect.op",
       "no boundary of this scenario's plan has op 'layernorm' at step 1 (did you mean "
       "'layer_norm'?)"},
      {"step = 1", "step = 2", "expect.step",
       "must be in [1, 1]: the scenario runs 1 training step(s), got 2"},
      {"step = 1", "step = 1\nchunk = 2", "expect.chunk",
       "must be in [1, 1]: the scenario runs 1 streamed chunk(s), got 2"},
  };
  for (const Case& c : cases) {
    INFO(c.to);
    TempDir dir;
    const fs::path scenario = dir.write("s.toml", replaced(base, c.from, c.to));
    for (const std::string& command :
         {"run --quiet " + q(scenario) + " --report " + q(dir.path() / "r.json"),
          "validate " + q(scenario)}) {
      const CliResult r = run_cli(command);
      INFO(command << ": " << r.err);
      CHECK(r.exit_code == 2);
      CHECK(r.err.rfind("shardsim: error: " + scenario.string() + ":", 0) == 0);
      CHECK(r.err.find(c.location + ": " + c.what) != std::string::npos);
      CHECK(r.out.empty());
    }
    CHECK(entries(dir.path()) == std::vector<std::string>{"s.toml"});
  }
  // The scenario as bundled validates, naming its expectation right.
  CHECK(run_cli("validate '" + source_scenario("faults/norm_unbiased_variance.toml") + "'")
            .exit_code == 0);
}

TEST_CASE("robustness: a type error in [mesh] or a placement prints its location once",
          "[robustness]") {
  expect_bad(replaced(kTiny, "ranks = 2", "ranks = 2\nschedule = 5"), "6:12: mesh.schedule",
             "expected a string, got an integer");
  expect_bad(replaced(kTiny, "placement = \"Shard(seq)\"", "placement = 7"),
             "11:13: tensors[0].placement",
             "expected a placement string, a list or a table, got an integer");
  TempDir dir;
  const fs::path scenario =
      dir.write("s.toml", replaced(kTiny, "placement = \"Shard(seq)\"", "placement = 7"));
  const CliResult r = run_cli("validate " + q(scenario));
  CHECK(r.err.find(scenario.string()) == r.err.rfind(scenario.string()));  // once
}

TEST_CASE("robustness: quoted input is cut at 80 characters, whatever its size", "[robustness]") {
  // A 1 MB unknown key: the message quotes its first 80 characters and an ellipsis.
  const std::string key(1 << 20, 'k');
  TempDir dir;
  const fs::path scenario =
      dir.write("s.toml", replaced(kTiny, "ranks = 2", "ranks = 2\n" + key + " = 1"));
  const CliResult r = run_cli("validate " + q(scenario));
  INFO(r.err.substr(0, 300));
  CHECK(r.exit_code == 2);
  CHECK(r.err.size() < 400);
  CHECK(r.err.find("unknown key '" + std::string(80, 'k') + "\u2026'") != std::string::npos);
  // A newline inside a quoted key is escaped, so the message stays one line.
  const fs::path newline =
      dir.write("n.toml", replaced(kTiny, "ranks = 2", "ranks = 2\n\"a\\nb\" = 1"));
  const CliResult n = run_cli("validate " + q(newline));
  CHECK(n.err.find("unknown key 'a\\nb'") != std::string::npos);
  CHECK(std::count(n.err.begin(), n.err.end(), '\n') == 1);
}

TEST_CASE("robustness: only regular input files are read, and scenarios up to 64 MiB",
          "[robustness]") {
  TempDir dir;
  const fs::path fifo = dir.path() / "fifo.toml";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  expect_refused(run_cli("validate /dev/zero"), "/dev/zero: is a device, not a regular file", "");
  expect_refused(run_cli("validate " + q(fifo)),
                 fifo.string() + ": is a FIFO (pipe), not a regular file", "");
  expect_refused(run_cli("run " + q(dir.path())), dir.path().string() + ": is a directory", "");
  // 65 MiB of comment lines (a sparse file would be zeros: the size check comes first anyway).
  const fs::path big = dir.path() / "big.toml";
  fs::copy_file(source_scenario("layernorm_sequence_sharded.toml"), big);
  fs::resize_file(big, (std::uintmax_t{65} << 20));
  expect_refused(run_cli("validate " + q(big)),
                 big.string() + ": is 68157440 bytes, over the limit of 67108864", "");
}

TEST_CASE("robustness: running out of memory is one 'shardsim: error:' line, exit 2",
          "[robustness]") {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  WARN("skipped: a sanitizer's shadow memory does not fit under ulimit -v");
#else
  // 2 x 5000 x 4000 doubles are 320 MB a tensor: over a 300 MB address space, and --max-memory
  // lets the estimate through, so an allocation fails (std::bad_alloc) and main reports it.
  TempDir dir;
  const fs::path scenario =
      dir.write("s.toml", replaced(kTiny, "shape = [2, 5, 4]", "shape = [2, 5000, 4000]"));
  const CliResult r =
      run_cli("run " + q(scenario) + " --max-memory 64GiB --report " + q(dir.path() / "r.json"),
              "ulimit -v 300000;");
  expect_refused(r, "out of memory (lower the scenario's sizes, or see --max-memory)", "");
  CHECK(entries(dir.path()) == std::vector<std::string>{"s.toml"});
#endif
}
