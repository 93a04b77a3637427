// CLI and resource limits: an unreadable scenario, a read-only or full output path
// (--report and --golden), and the memory refusal with --max-memory. Each case checks exit 2,
// one message naming the path, and that nothing (not even a *.tmp.* file) was left behind.
// Cases already in cli_test.cpp (unknown flag, missing file, missing directory) are not repeated.
#include <sys/mount.h>

#include "cli_test_support.hpp"
#include "core/error.hpp"

using namespace cli_test;

namespace {

const std::string kScenario = source_scenario("layernorm_sequence_sharded.toml");

// Checks exit 2 with one message on stderr that contains `path` and `what`, nothing on stdout.
void expect_refused(const CliResult& r, const std::string& path, const std::string& what) {
  INFO("stderr: " << r.err);
  CHECK(r.exit_code == 2);
  CHECK(r.err.rfind("shardsim: error: ", 0) == 0);
  CHECK(r.err.find(path) != std::string::npos);
  CHECK(r.err.find(what) != std::string::npos);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK(r.out.empty());
}

// A 64 KiB tmpfs mounted for the lifetime of the object and filled up, or unavailable (no
// CAP_SYS_ADMIN, e.g. in an unprivileged container).
class FullTmpfs {
 public:
  FullTmpfs() : dir_(std::make_unique<TempDir>()) {
    mounted_ = ::mount("tmpfs", dir_->path().c_str(), "tmpfs", 0, "size=64k,mode=0777") == 0;
    if (!mounted_) return;
    // Fill it: tmpfs refuses the first write past its size with ENOSPC.
    std::ofstream filler(dir_->path() / "filler", std::ios::binary);
    const std::string block(4096, 'x');
    for (int i = 0; i < 64 && filler.write(block.data(), block.size()); ++i) {
    }
  }
  ~FullTmpfs() {
    if (mounted_) ::umount(dir_->path().c_str());
  }
  bool mounted() const { return mounted_; }
  const fs::path& path() const { return dir_->path(); }

 private:
  std::unique_ptr<TempDir> dir_;
  bool mounted_ = false;
};

}  // namespace

TEST_CASE("robustness: an unreadable scenario file exits 2 naming it", "[robustness]") {
  if (as_nobody().empty()) {
    WARN("skipped: running as root without setpriv, so permission bits cannot make a file unreadable");
    return;
  }
  TempDir dir;
  const fs::path scenario = dir.write("s.toml", slurp(kScenario));
  fs::permissions(scenario, fs::perms::owner_write);  // -w-------: nobody cannot read it
  const CliResult r = run_cli("run " + q(scenario) + " --report " + q(dir.path() / "r.json"), as_nobody());
  expect_refused(r, scenario.string(), "cannot open");
  CHECK(entries(dir.path()) == std::vector<std::string>{"s.toml"});
}

TEST_CASE("robustness: a read-only output directory exits 2 naming it, before any work",
          "[robustness]") {
  if (as_nobody().empty()) {
    WARN("skipped: running as root without setpriv, so permission bits cannot make a directory read-only");
    return;
  }
  TempDir dir;
  const fs::path out = dir.path() / "ro";
  fs::create_directories(out);
  fs::permissions(out, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                           fs::perms::others_read | fs::perms::others_exec);  // 0755, owner root
  SECTION("--report") {
    const CliResult r = run_cli("run --quiet " + q(kScenario) + " --report " + q(out / "r.json"), as_nobody());
    expect_refused(r, (out / "r.json").string(), "");
  }
  SECTION("--golden into the read-only directory") {
    const CliResult r = run_cli("run --quiet " + q(kScenario) + " --dtype f32 --golden " + q(out), as_nobody());
    expect_refused(r, out.string(), "not writable");
  }
  SECTION("--golden into a new directory under the read-only one") {
    const CliResult r =
        run_cli("run --quiet " + q(kScenario) + " --dtype f32 --golden " + q(out / "g"), as_nobody());
    expect_refused(r, (out / "g").string(), "not writable");
  }
  CHECK(entries(out).empty());
}

TEST_CASE("robustness: a full output file system exits 2 naming the path, leaving nothing",
          "[robustness]") {
  FullTmpfs full;
  if (!full.mounted()) {
    WARN("skipped: cannot mount a tmpfs here (needs CAP_SYS_ADMIN); ENOSPC is not exercised");
    return;
  }
  SECTION("--report") {
    const fs::path report = full.path() / "r.json";
    const CliResult r = run_cli("run --quiet " + q(kScenario) + " --report " + q(report));
    expect_refused(r, report.string(), "No space left on device");
  }
  SECTION("--golden into a new directory") {
    const fs::path golden = full.path() / "golden";
    const CliResult r = run_cli("run --quiet " + q(kScenario) + " --dtype f32 --golden " + q(golden));
    expect_refused(r, golden.string(), "No space left on device");
  }
  // Only the filler remains: no report, no golden directory, no temporary file.
  CHECK(entries(full.path()) == std::vector<std::string>{"filler"});
}

TEST_CASE("robustness: oversized runs are refused before allocating, --max-memory overrides",
          "[robustness]") {
  TempDir dir;
  const std::string report = " --report " + q(dir.path() / "r.json");
  SECTION("an estimate beyond the default limit names the GiB needed") {
    // [2000, 5000, 4000] f64 is 4e10 elements, 320 GB for x alone: over any default limit here
    // (a fraction of physical memory), and refused long before anything is allocated.
    const fs::path big = dir.write("big.toml", R"toml(name = "big"
precisions = ["f64"]

[mesh]
ranks = 2

[[tensors]]
name = "x"
axes = ["batch", "seq", "hidden"]
shape = [2000, 5000, 4000]
placement = "Shard(seq)"

[[steps]]
op = "layer_norm"
input = "x"
output = "y"
)toml");
    const CliResult r = run_cli("run --quiet " + q(big) + " --precision f64" + report);
    expect_refused(r, big.string(), "GiB of memory, over the limit of");
    CHECK(r.err.find("--max-memory") != std::string::npos);
  }
  SECTION("--max-memory lowers the limit below a small run") {
    const CliResult r = run_cli("run --quiet " + q(kScenario) + " --max-memory 1K" + report);
    expect_refused(r, kScenario, "over the limit of");
  }
  SECTION("--max-memory raises or keeps the limit for a run that fits") {
    const CliResult r = run_cli("run --quiet " + q(kScenario) + " --max-memory 64G");
    INFO(r.err);
    CHECK(r.exit_code == 0);
  }
  SECTION("a malformed --max-memory is a usage error") {
    const CliResult r = run_cli("run --quiet " + q(kScenario) + " --max-memory lots" + report);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("max-memory") != std::string::npos);
  }
  CHECK(entries(dir.path()).size() <= 1);  // at most big.toml: never a report
  CHECK(no_temp_files(dir.path()));
}

TEST_CASE("robustness: flag values are refused naming the flag, never read otherwise",
          "[robustness]") {
  TempDir dir;
  const fs::path golden = dir.path() / "golden";
  const CliResult made = run_cli("run --quiet " + q(kScenario) + " --golden " + q(golden) +
                                 " --dtype f32 --format npy");
  REQUIRE(made.exit_code == 0);
  const std::string y = "f32__s1__c1__y.npy";  // [2, 13, 16] f32: 1664 data bytes
  struct Case {
    std::string args, message;
  };
  const std::string s = q(kScenario);
  for (const Case& c : {
           Case{"run " + s + " --precision f32,", "--precision: empty item in list 'f32,'"},
           Case{"run " + s + " --precision ''", "--precision: empty item in list ''"},
           Case{"precision " + s + " --levels f32,,f64", "--levels: empty item in list"},
           Case{"precision " + s + " --reduce-order rank,", "--reduce-order: empty item in list"},
           Case{"precision " + s + " --schedule shuffle:x", "--schedule: unknown schedule"},
           Case{"run ''", "SCENARIO is an empty path"},
           Case{"compare '' " + q(golden), "compare: GOLDEN is an empty path"},
           Case{"run " + s + " --golden " + q(dir.path() / "g2") + " --dtype f32,f32",
                "--dtype: 'f32' is listed twice in 'f32,f32'"},
           // both = f64,f32 and all = every dtype: a dtype they hold, listed again, is twice.
           Case{"run " + s + " --golden " + q(dir.path() / "g2") + " --dtype both,f32",
                "--dtype: 'f32' is listed twice in 'both,f32'"},
           Case{"run " + s + " --golden " + q(dir.path() / "g2") + " --dtype all,bf16",
                "--dtype: 'bf16' is listed twice in 'all,bf16'"},
           // A reference narrower than f64 would make goldens of its own rounding errors.
           Case{"run " + s + " --golden " + q(dir.path() / "g2") + " --reference bf16",
                "--reference: bf16 is narrower than f64; a reference is f64, dd, qd or mpN"},
           Case{"run " + s + " --golden " + q(dir.path() / "g2") + " --reference f32",
                "--reference: f32 is narrower than f64"},
           // --accumulate acts on bf16/f16 runs: where none runs it is refused, not ignored.
           Case{"run " + s + " --precision f32,f64 --accumulate storage",
                "--accumulate: applies to bf16 and f16 runs, and none runs here (precisions "
                "f32,f64)"},
           Case{"explain " + s + " --accumulate storage",
                "--accumulate: applies to bf16 and f16 runs, and none runs here (precisions f64)"},
           Case{"compare " + q(golden) + " " + q(golden) + " --map a=b --map a=c",
                "--map 'a=c': 'a' is already mapped to 'b'"},
           // 1e-400 is below the double range: it would read as 0, a different tolerance.
           Case{"compare " + q(golden) + " " + q(golden) + " --rtol 1e-400",
                "--rtol: '1e-400' is below the double range and would read as 0"},
           Case{"compare " + q(golden) + " " + q(golden) + " --atol 0x1p-3",
                "--atol: expected a decimal number, got '0x1p-3'"},
       }) {
    INFO(c.args);
    const CliResult r = run_cli(c.args);
    CHECK(r.exit_code == 2);
    CHECK(r.err.rfind("shardsim: error: " + c.message, 0) == 0);
    CHECK(r.out.empty());
  }
  CHECK_FALSE(fs::exists(dir.path() / "g2"));
  // Zero and tiny-but-representable tolerances are read as given.
  CHECK(run_cli("compare " + q(golden) + " " + q(golden) + " --rtol 0 --atol 1e-300").exit_code ==
        0);
  // A truncated npy names the byte count it needs: 1664 data bytes, one missing.
  const fs::path candidate = dir.path() / "cand";
  fs::create_directories(candidate);
  const std::string bytes = slurp(golden / y);
  std::ofstream(candidate / y, std::ios::binary) << bytes.substr(0, bytes.size() - 1);
  const CliResult r = run_cli("compare " + q(golden) + " " + q(candidate));
  CHECK(r.exit_code == 2);
  CHECK(r.err.find(": truncated data: shape (2, 13, 16) of '<f4' needs 1664 bytes, the file "
                   "holds 1663") != std::string::npos);
}

TEST_CASE("robustness: a scenario name with a control character is refused", "[robustness]") {
  // Printed as it is to the terminal ("NAME: pass"), an ESC could recolour or move the cursor.
  TempDir dir;
  for (const std::string& name :
       {std::string("a\\u001b[31mred"), std::string("a\\u0000b"), std::string("a\\u007f"),
        std::string("a\\u0085"), std::string("a\\u202eb")}) {
    INFO(name);
    const fs::path scenario =
        dir.write("s.toml", replaced(kTiny, "name = \"tiny\"", "name = \"" + name + "\""));
    const CliResult r = run_cli("validate " + q(scenario));
    CHECK(r.exit_code == 2);
    CHECK(r.err.rfind("shardsim: error: " + scenario.string() + ":1:8: name: the name '", 0) == 0);
    CHECK(r.err.find("holds a control character") != std::string::npos);
  }
  // Other characters outside ASCII are names like any other.
  const fs::path ok =
      dir.write("ok.toml", replaced(kTiny, "name = \"tiny\"", "name = \"Ünïcödé\""));
  CHECK(run_cli("validate " + q(ok)).exit_code == 0);
}

TEST_CASE("robustness: user text reaches the terminal escaped: C0, C1, bidi overrides",
          "[robustness]") {
  // U+009B (UTF-8 C2 9B) is a CSI on some terminals, U+202E reverses what follows it: in a
  // message they appear as \u009b and \u202e, as ESC appears as \x1b.
  CHECK(shardsim::clipped("a\x1b[2Jb") == "a\\x1b[2Jb");
  CHECK(shardsim::clipped("se\xc2\x9b"
                          "2Jed") == "se\\u009b2Jed");
  CHECK(shardsim::clipped("x\xe2\x80\xaey") == "x\\u202ey");
  CHECK(shardsim::clipped("x\xe2\x81\xa9y") == "x\\u2069y");
  // A byte outside a well-formed UTF-8 sequence: a lone 0x9B (CSI in 8-bit mode), a lone
  // continuation byte, a truncated sequence, an overlong lead.
  CHECK(shardsim::clipped("a\x9b"
                          "b") == "a\\x9bb");
  CHECK(shardsim::clipped("a\xbf") == "a\\xbf");
  CHECK(shardsim::clipped("a\xe2\x80") == "a\\xe2\\x80");
  CHECK(shardsim::clipped("\xc0\xaf") == "\\xc0\\xaf");
  // Other characters outside ASCII pass: U+00E9, U+2026 (E2 80 A6), U+2014 (E2 80 94).
  CHECK(shardsim::clipped("\xc3\xa9\xe2\x80\xa6\xe2\x80\x94") ==
        "\xc3\xa9\xe2\x80\xa6\xe2\x80\x94");
  // A description keeps its lines and tabs, and loses nothing else.
  CHECK(shardsim::escaped("one\n\ttwo\x1b", true) == "one\n\ttwo\\x1b");

  TempDir dir;
  // An unknown key with a C1 control: the refusal quotes it escaped.
  const fs::path key = dir.write("key.toml",
                                 "\"se\xc2\x9b"
                                 "2Jed\" = 1\n" +
                                     kTiny);
  const CliResult refused = run_cli("validate " + q(key));
  CHECK(refused.exit_code == 2);
  CHECK(refused.err.find("se\\u009b2Jed") != std::string::npos);
  CHECK(refused.err.find("\xc2\x9b") == std::string::npos);
  // explain prints the description, escaped: no ESC reaches the terminal.
  const fs::path described = dir.write(
      "d.toml", replaced(kTiny, "precisions", "description = \"clear\\u001b[2J\"\nprecisions"));
  const CliResult r = run_cli("explain " + q(described));
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("clear\\x1b[2J") != std::string::npos);
  CHECK(r.out.find('\x1b') == std::string::npos);
}
