// The function lab: docs/lab.md's walk-through through the CLI with piped stdin, the banner, the
// precision, and bad commands (a script stops with exit 2).
#include "lab/lab.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>

#include "cli_test_support.hpp"
#include "core/error.hpp"

namespace fs = std::filesystem;
using cli_test::CliResult;
using cli_test::q;
using cli_test::run_cli;
using cli_test::TempDir;
using shardsim::InputError;
using shardsim::Lab;
using shardsim::parse_precision;

namespace {

// Runs `shardsim lab ARGS` with `script` on stdin (a file, so stdin is not a terminal).
CliResult run_lab(const std::string& script, const std::string& args = "") {
  const TempDir dir;
  return run_cli("lab " + args + " < " + q(dir.write("in", script)));
}

std::size_t count(const std::string& text, const std::string& word) {
  std::size_t n = 0;
  for (std::size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) ++n;
  return n;
}

// docs/lab.md's walk-through: reset, a = 1, x = 1, predict y = 1 and
// slope 2, step; then x = 0.5, predict y = 0.25 and slope 1, step. By hand: y = a*x^2 = 1 and
// 0.25, slope = 2*a*x = 2 and 1, so all four predictions are right.
const std::string kWalkthrough =
    "reset\nset a 1\nset x 1\npredict y 1 slope 2\nstep\n"
    "set x 0.5\npredict y 0.25 slope 1\nstep\nshow\n";

}  // namespace

TEST_CASE("lab: the docs/lab.md walk-through works as written, at every precision", "[lab]") {
  for (const char* precision : {"f32", "f64", "mp256"}) {
    INFO(precision);
    const CliResult r = run_lab(kWalkthrough, std::string("--precision ") + precision);
    INFO(r.err);
    CHECK(r.exit_code == 0);
    CHECK(r.err.empty());
    CHECK(r.out.find(std::string("in ") + precision) != std::string::npos);
    CHECK(r.out.find("y     = a*x^2 = 1 ") != std::string::npos);
    CHECK(r.out.find("slope = 2*a*x = 2 ") != std::string::npos);
    CHECK(r.out.find("step 2: a = 1, x = 0.5") != std::string::npos);
    CHECK(r.out.find("y     = a*x^2 = 0.25 ") != std::string::npos);
    CHECK(r.out.find("slope = 2*a*x = 1 ") != std::string::npos);
    CHECK(count(r.out, "  right") == 4);
    CHECK(count(r.out, "wrong") == 0);
    CHECK(r.out.find("4 of 4 prediction(s) right") != std::string::npos);
  }
}

TEST_CASE("lab: the banner says what it illustrates and that it is not LayerNorm", "[lab]") {
  const CliResult r = run_lab("quit\nstep\n");
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("illustrates sensitivity to input coordinates") != std::string::npos);
  CHECK(r.out.find("It is not LayerNorm") != std::string::npos);
  CHECK(r.out.find("step 1") == std::string::npos);  // nothing runs after quit
}

TEST_CASE("lab: wrong predictions, and the precision of the evaluation", "[lab]") {
  // a = 3, x = 0.1: y = 0.03 and slope 0.6 up to rounding. 0.031 is wrong (|error| = 1e-3 >
  // 1e-6), 0.6000001 is right (within 1e-6 * max(1, |0.6|)).
  CliResult r = run_lab("set a 3\nset x 0.1\npredict y 0.031 slope 0.6000001\nstep\n");
  CHECK(r.exit_code == 0);
  auto line_with = [&](const std::string& text) {
    const std::size_t at = r.out.find(text);
    REQUIRE(at != std::string::npos);
    return r.out.substr(at, r.out.find('\n', at) - at);
  };
  CHECK(line_with("predicted 0.031 ").ends_with("wrong"));
  CHECK(line_with("predicted 0.6000001 ").ends_with("right"));
  // In f32, 3 * 0.1f * 0.1f rounds to 0.030000001 (shortest text of the f32 result); in f64 the
  // result prints as 0.030000000000000006 (3 * 0.1 = 0.30000000000000004, times 0.1).
  r = run_lab("set a 3\nset x 0.1\nstep\n", "--precision f32");
  CHECK(r.out.find("y     = a*x^2 = 0.030000001") != std::string::npos);
  r = run_lab("set a 3\nset x 0.1\nstep\n", "--precision f64");
  CHECK(r.out.find("y     = a*x^2 = 0.030000000000000006") != std::string::npos);
}

TEST_CASE("lab: a bad command in a script exits 2 naming the line", "[lab]") {
  struct Case {
    std::string script;
    std::string message;
  };
  for (const Case& c :
       {Case{"reset\nfrobnicate\nstep\n", "stdin:2: unknown command 'frobnicate'"},
        Case{"set b 1\n", "stdin:1: unknown variable 'b'"},
        Case{"set x one\n", "stdin:1: 'one' is not a number"},
        Case{"set x nan\n", "stdin:1: 'nan' is not a number"},
        Case{"predict z 1\n", "stdin:1: predict: unknown quantity 'z'"},
        Case{"predict y 1 y 2\n", "stdin:1: predict: 'y' given twice"},
        Case{"step now\n", "stdin:1: usage: step"}, Case{"quit now\n", "stdin:1: usage: quit"},
        // Control bytes are quoted escaped, a NUL too (it once cut the line).
        Case{"se\x01t a 1\n", "stdin:1: unknown command 'se\\x01t'"},
        Case{std::string("set a 1\0junk\n", 13), "stdin:1: '1\\x00junk' is not"}}) {
    INFO(c.script);
    const CliResult r = run_lab(c.script);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(c.message) != std::string::npos);
    CHECK(r.out.find("step 1") == std::string::npos);  // nothing after the bad line ran
  }
  CHECK(run_lab("", "--precision mp7").exit_code == 2);
}

TEST_CASE("lab: a true value that overflowed makes every prediction wrong", "[lab]") {
  // a = 1e308, x = 10: y = a x^2 = 1e310 and slope = 2 a x = 2e309 both overflow f64 (max about
  // 1.8e308) to inf; f32 (max about 3.4e38) likewise with a = 3e38, x = 2. |p - inf| <= 1e-6 inf
  // held for any finite p, which once judged these predictions right.
  for (const auto& [precision, a, x] :
       {std::tuple{"f64", "1e308", "10"}, std::tuple{"f32", "3e38", "2"}}) {
    INFO(precision);
    Lab lab(parse_precision(precision));
    lab.execute(std::string("set a ") + a);
    lab.execute(std::string("set x ") + x);
    lab.execute("predict y -5 slope 7");
    const std::string step = lab.execute("step");
    CHECK(count(step, "wrong (the true value overflowed)") == 2);
    CHECK(count(step, "right") == 0);
    CHECK(lab.execute("show").find("0 of 2 prediction(s) right") != std::string::npos);
  }
}

TEST_CASE("lab: a rejected command leaves the state unchanged", "[lab]") {
  Lab lab(parse_precision("f64"));
  lab.execute("set x 2");
  lab.execute("predict y 4");
  CHECK_THROWS_AS(lab.execute("predict y 5 slope x"), InputError);  // validated before applying
  CHECK_THROWS_AS(lab.execute("set x 1e"), InputError);
  CHECK(lab.execute("show") ==
        "a = 1, x = 2; predicted y 4, slope -; 0 step(s), 0 of 0 prediction(s) right\n");
  const std::string step = lab.execute("step");
  CHECK(step.find("y     = a*x^2 = 4 ") != std::string::npos);
  CHECK(step.find("right") != std::string::npos);
  CHECK(step.find("(no prediction)") != std::string::npos);  // slope was not predicted
  CHECK(lab.execute("# a comment").empty());
  CHECK(lab.execute("   ").empty());
  CHECK_FALSE(lab.finished());
  lab.execute("quit");
  CHECK(lab.finished());
}
