// Scenario input: every bad scenario gets exit 2, ONE message on stderr located as
// "FILE:LINE:COL: KEY.PATH: ...", nothing on stdout, and no report, golden directory or temporary
// file. The cases already in cli_test.cpp (malformed TOML, unknown op/top-level key, ranks = 0,
// unknown axis, zero size, duplicate name, use before definition, mp7) are not repeated.
// Non-finite numbers, init keys and the other nonsense of round 2 are in
// robustness_hostile_test.cpp.
#include "cli_test_support.hpp"

using namespace cli_test;

namespace {

// Runs the scenario with both --report and --golden pointing into a fresh directory and checks
// the bad-input contract.
void expect_bad(const std::string& text, const std::string& location, const std::string& what) {
  TempDir dir;
  const fs::path scenario = dir.write("s.toml", text);
  const CliResult r = run_cli("run " + q(scenario) + " --report " + q(dir.path() / "r.json") +
                              " --golden " + q(dir.path() / "golden"));
  INFO("stderr: " << r.err);
  CHECK(r.exit_code == 2);
  CHECK(r.err.rfind("shardsim: error: " + scenario.string() + ":" + location + ": ", 0) == 0);
  CHECK(r.err.find(what) != std::string::npos);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);  // one message
  CHECK(r.out.empty());
  CHECK(entries(dir.path()) == std::vector<std::string>{"s.toml"});
}

const char* kDropoutTail = "\n[[steps]]\nop = \"dropout\"\ninput = \"y\"\noutput = \"z\"\np = ";

}  // namespace

TEST_CASE("robustness: bad scenario values exit 2 with a located message", "[robustness]") {
  SECTION("a wrong value type") {
    expect_bad(replaced(kTiny, "ranks = 2", "ranks = \"two\""), "5:9: mesh.ranks",
               "expected an integer, got a string");
  }
  SECTION("a negative size") {
    expect_bad(replaced(kTiny, "[2, 5, 4]", "[2, -5, 4]"), "10:13: tensors[0].shape[1]",
               "size of axis 'seq' must be positive, got -5");
  }
  SECTION("ranks < 1 (ranks is also the cp_size of the attention plans)") {
    expect_bad(replaced(kTiny, "ranks = 2", "ranks = -3"), "5:9: mesh.ranks",
               "ranks must be in [1, 4096], got -3");
  }
  SECTION("eps < 0") {
    expect_bad(replaced(kTiny, "output = \"y\"", "output = \"y\"\neps = -1e-5"),
               "17:7: steps[0].eps", "eps must be in [0, 3.4028234663852886e+38]");
  }
  SECTION("an unknown op key, with a suggestion (a transposition is one edit)") {
    expect_bad(replaced(kTiny, "output = \"y\"", "output = \"y\"\nesp = 1e-5"),
               "17:1: steps[0].esp", "unknown key 'esp' (did you mean 'eps'?)");
  }
  SECTION("dropout p = 1 and p < 0") {
    expect_bad(kTiny + kDropoutTail + "1.0\n", "22:5: steps[1].p", "p must be in [0, 1), got 1");
    expect_bad(kTiny + kDropoutTail + "-0.1\n", "22:5: steps[1].p",
               "p must be in [0, 1), got -0.1");
  }
  SECTION("a shape mismatch between steps names both shapes") {
    expect_bad(
        kTiny +
            "\n[[tensors]]\nname = \"w\"\nrole = \"parameter\"\naxes = [\"ffn\", \"hidden\"]\n"
            "shape = [8, 5]\n\n[[steps]]\nop = \"linear\"\ninput = \"y\"\nweight = \"w\"\n"
            "output = \"z\"\n",
        "27:10: steps[1].weight",
        "'w' [ffn=8, hidden=5] contracts hidden=5 but 'y' is [batch=2, seq=5, hidden=4]");
  }
  SECTION("a fault name that does not exist") {
    expect_bad(replaced(kTiny, "[\"f64\"]", "[\"f64\"]\nfaults = [\"no_such_fault\"]"),
               "3:11: faults[0]", "unknown fault 'no_such_fault'");
  }
  SECTION("precision f16x") {
    expect_bad(replaced(kTiny, "[\"f64\"]", "[\"f16x\"]"), "2:15: precisions[0]",
               "invalid precision 'f16x'");
  }
  SECTION("an element count that overflows 64 bits") {
    expect_bad(replaced(kTiny, "[2, 5, 4]", "[4294967296, 4294967296, 4]"),
               "10:9: tensors[0].shape", "overflows a 64-bit integer");
  }
}

TEST_CASE("robustness: window <= 0 is refused at its key", "[robustness]") {
  const std::string base = slurp(source_scenario("attention_stream_cp1.toml"));
  for (const char* window : {"0", "-2"}) {
    INFO("window = " << window);
    expect_bad(replaced(base, "\nwindow = 4\n", std::string("\nwindow = ") + window + "\n"),
               "71:10: steps[0].window", std::string("window must be >= 1 key"));
  }
}
