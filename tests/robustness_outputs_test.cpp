// Outputs are checked before any computation and never clobber anything: an input, a device, a
// directory, another output. And the CLI's own usage errors: every message starts
// "shardsim: error: ", exact option names only, no stray arguments, help for every command.
#include <sys/stat.h>

#include "cli_test_support.hpp"

using namespace cli_test;

namespace {

const std::string kScenario = source_scenario("layernorm_sequence_sharded.toml");

// Exit 2, one line naming `flag`, `path` and `what`, nothing on stdout (so no table: nothing
// was computed).
void expect_refused(const CliResult& r, const std::string& flag_and_path, const std::string& what) {
  INFO("stderr: " << r.err);
  CHECK(r.exit_code == 2);
  CHECK(r.err.rfind("shardsim: error: " + flag_and_path, 0) == 0);
  CHECK(r.err.find(what) != std::string::npos);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK(r.out.empty());
}

}  // namespace

TEST_CASE(
    "robustness: outputs that would clobber an input, a device or each other are refused first",
    "[robustness]") {
  TempDir dir;
  const fs::path scenario = dir.write("s.toml", slurp(kScenario));
  const std::string s = q(scenario);
  const fs::path fifo = dir.path() / "fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  fs::create_symlink("/dev/null", dir.path() / "to_null");
  fs::create_symlink(scenario, dir.path() / "to_scenario");
  fs::create_directory(dir.path() / "old");  // a previous golden set's directory
  const std::string d = dir.path().string();
  struct Case {
    std::string args, flag_and_path, what;
  };
  const std::vector<Case> cases = {
      {"run " + s + " --report " + s, "--report " + scenario.string(),
       "is an input of this command"},
      {"run " + s + " --report " + q(dir.path() / "to_scenario"), "--report " + d + "/to_scenario",
       "is an input of this command"},
      {"run " + s + " --report /dev/full", "--report /dev/full", "is a device, FIFO or socket"},
      {"run " + s + " --report " + q(dir.path() / "to_null"), "--report " + d + "/to_null",
       "is a device, FIFO or socket"},
      {"run " + s + " --report " + q(fifo), "--report " + fifo.string(),
       "is a device, FIFO or socket"},
      {"run " + s + " --report ''", "--report: needs a path", "got an empty one"},
      {"run " + s + " --report " + q(dir.path()), "--report " + d,
       "is a directory; give a file name"},
      {"precision " + s + " --html " + q(dir.path()), "--html " + d, "is a directory"},
      {"precision " + s + " --json " + q(dir.path() / "p.json") + " --html " +
           q(dir.path() / "p.json"),
       "--html " + d + "/p.json", "is also the path of --json"},
      {"run " + s + " --golden " + q(dir.path() / "g") + " --report " + q(dir.path() / "g"),
       "--golden " + d + "/g", "is also the path of --report"},
      {"run " + s + " --golden " + q(dir.path() / "old") + " --report " +
           q(dir.path() / "old/manifest.json"),
       "--report " + d + "/old/manifest.json", "would be overwritten by the files --golden"},
      {"run " + s + " --golden " + q(dir.path()) + " --format npy --report " +
           q(dir.path() / "r.npy"),
       "--report " + d + "/r.npy", "would be overwritten by the files --golden"},
      {"run " + s + " --golden " + q(scenario), "--golden " + scenario.string(),
       "exists and is not a directory"},
  };
  for (const Case& c : cases) {
    INFO(c.args);
    expect_refused(run_cli(c.args), c.flag_and_path, c.what);
  }
  // Nothing was written or replaced: the links are still links, the scenario unchanged.
  CHECK(entries(dir.path()) ==
        std::vector<std::string>{"fifo", "old", "s.toml", "to_null", "to_scenario"});
  CHECK(entries(dir.path() / "old").empty());
  CHECK(fs::is_symlink(dir.path() / "to_null"));
  CHECK(slurp(scenario) == slurp(kScenario));
}

TEST_CASE("robustness: an output that would clobber a scenario's input file is refused",
          "[robustness][input_files]") {
  // init = { file, tensor }: the file is an input of the command too, checked once it is known.
  TempDir dir;
  const std::string bundled = source_scenario("captured_mlp_block/scenario.toml");
  const fs::path scenario = dir.write("scenario.toml", slurp(bundled));
  const std::string weights =
      slurp(fs::path(bundled).parent_path().string() + "/inputs.safetensors");
  const fs::path inputs = dir.write("inputs.safetensors", weights);
  const std::string s = q(scenario);
  const std::string d = dir.path().string();
  expect_refused(run_cli("run " + s + " --report " + q(inputs)), "--report " + inputs.string(),
                 "is an input of this command");
  expect_refused(run_cli("precision " + s + " --json " + q(inputs)), "--json " + inputs.string(),
                 "is an input of this command");
  fs::create_symlink(inputs, dir.path() / "to_inputs");
  expect_refused(run_cli("run " + s + " --report " + q(dir.path() / "to_inputs")),
                 "--report " + d + "/to_inputs", "is an input of this command");
  CHECK(slurp(inputs) == weights);
}

TEST_CASE("robustness: a --report symlink to a regular file updates the file it points to",
          "[robustness]") {
  TempDir dir;
  const fs::path target = dir.write("target.json", "old");
  fs::create_symlink(target, dir.path() / "link.json");
  const CliResult r =
      run_cli("run --quiet " + q(kScenario) + " --report " + q(dir.path() / "link.json"));
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(fs::is_symlink(dir.path() / "link.json"));
  CHECK(slurp(target).find("\"verdict\": \"pass\"") != std::string::npos);
  CHECK(r.out.find("report: written to " + (dir.path() / "link.json").string()) !=
        std::string::npos);
}

TEST_CASE("robustness: CLI usage errors all start 'shardsim: error:' and write nothing",
          "[robustness]") {
  const std::string s = q(kScenario);
  struct Case {
    std::string args, what;
  };
  const std::vector<Case> cases = {
      {"frobnicate", "unknown command 'frobnicate'; 'shardsim help' lists the commands"},
      {"rum " + s, "unknown command 'rum' (did you mean 'run'?)"},
      {"help frobnicate", "unknown command 'frobnicate'"},
      // Exact option names only: no unique-prefix guessing.
      {"run " + s + " --prec f64", "run: unrecognised option '--prec'"},
      {"precision " + s + " --lev f32,f64", "precision: unrecognised option '--lev'"},
      {"compare a b --rt 1", "compare: unrecognised option '--rt'"},
      {"run " + s + " --precision f64,f64", "--precision: precision 'f64' is listed twice"},
      {"precision " + s + " --levels f32,f64,f32", "--levels: precision 'f32' is listed twice"},
      {"run " + s + " --precision f64,mp7", "--precision: invalid precision 'mp7'"},
      {"run " + s + " --reduce-order ringg", "--reduce-order: unknown reduce order 'ringg'"},
      {"lab foo", "lab takes no arguments (commands come from stdin), got 'foo'"},
      {"list foo", "list takes no arguments, got 'foo'"},
      {"run", "missing SCENARIO (usage: shardsim run SCENARIO [options])"},
      {"compare " + s + " " + s + " --rtol inf", "--rtol must be >= 0 and finite"},
  };
  for (const Case& c : cases) {
    INFO(c.args);
    const CliResult r = run_cli(c.args + " < /dev/null");
    INFO("stderr: " << r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.rfind("shardsim: error: ", 0) == 0);
    CHECK(r.err.find(c.what) != std::string::npos);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK(r.out.empty());
  }
}

TEST_CASE("robustness: every command has help, and list states the mp bits limit", "[robustness]") {
  for (const std::string command :
       {"run", "explain", "validate", "precision", "compare", "lab", "list"}) {
    INFO(command);
    const CliResult help = run_cli("help " + command);
    const CliResult flag = run_cli(command + " --help");
    CHECK(help.exit_code == 0);
    CHECK(help.out.rfind("usage: shardsim " + command, 0) == 0);
    CHECK(flag.out == help.out);
    CHECK(help.err.empty());
  }
  // help about help is the usage, as 'help' and '--help' are.
  const CliResult usage = run_cli("help");
  CHECK(usage.exit_code == 0);
  CHECK(usage.out.rfind("usage: shardsim COMMAND [ARGS]", 0) == 0);
  for (const std::string args : {"help help", "--help"}) {
    INFO(args);
    const CliResult r = run_cli(args);
    CHECK(r.exit_code == 0);
    CHECK(r.out == usage.out);
    CHECK(r.err.empty());
  }
  const CliResult list = run_cli("list");
  CHECK(list.out.find("precisions: bf16, f16, f32, f64, dd, qd, mp<bits> (64 <= bits <= "
                      "65536); bf16/f16 accumulate: f32, storage") != std::string::npos);
  TempDir dir;
  const std::string text = replaced(kTiny, "[\"f64\"]", "[\"mp65536\"]");
  CHECK(run_cli("validate " + q(dir.write("ok.toml", text))).exit_code == 0);
  CHECK(
      run_cli("validate " + q(dir.write("no.toml", replaced(text, "65536", "65537")))).exit_code ==
      2);
}

TEST_CASE("robustness: precision says where it wrote its reports", "[robustness]") {
  TempDir dir;
  const fs::path html = dir.path() / "p.html";
  const fs::path json = dir.path() / "p.json";
  const CliResult r = run_cli("precision --quiet " + q(kScenario) + " --levels f32,f64 --html " +
                              q(html) + " --json " + q(json));
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("html report: written to " + html.string() + "\n") != std::string::npos);
  CHECK(r.out.find("json report: written to " + json.string() + "\n") != std::string::npos);
  CHECK(fs::file_size(html) > 0);
}
