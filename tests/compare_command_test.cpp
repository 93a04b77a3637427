// End-to-end: `shardsim run --golden` (atomic, byte-identical on replay, usage errors) and
// `shardsim compare` (exit codes, the worst element with its named index and owning rank,
// NaN reporting, npy candidates, --map, hostile files).
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "cli_test_support.hpp"
#include "golden/golden_set.hpp"

namespace fs = std::filesystem;
using namespace shardsim;
// The CLI runner, scratch directories and file helpers are the robustness tests'.
using cli_test::CliResult;
using cli_test::entries;
using cli_test::q;
using cli_test::run_cli;
using cli_test::slurp;
using cli_test::TempDir;

namespace {

void spit(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string scenario(const std::string& name) {
  return q(fs::path(SHARDSIM_SOURCE_DIR) / "scenarios" / name);
}

// Writes goldens of the sequence-sharded LayerNorm (f32 only, to keep the files small).
fs::path write_goldens(const TempDir& dir, const std::string& extra = "") {
  const fs::path golden = dir.path() / "golden";
  const CliResult r = run_cli("run --quiet " + scenario("layernorm_sequence_sharded.toml") +
                              " --golden " + q(golden) + " --dtype f32 " + extra);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return golden;
}

}  // namespace

TEST_CASE("run --golden: replays give byte-identical goldens, written atomically", "[compare]") {
  TempDir dir;
  for (const char* format : {"safetensors", "npy"}) {
    INFO(format);
    const fs::path a = dir.path() / (std::string(format) + "_a");
    const fs::path b = dir.path() / (std::string(format) + "_b");
    for (const fs::path& target : {a, b}) {
      const CliResult r =
          run_cli("run --quiet " + scenario("layernorm_train_sequence_sharded.toml") +
                  " --golden " + q(target) + " --format " + format + " --reference mp128");
      INFO(r.err);
      REQUIRE(r.exit_code == 0);
      CHECK(r.out.find("goldens: ") != std::string::npos);
    }
    const std::vector<std::string> names = entries(a);
    REQUIRE(names == entries(b));
    CHECK(std::find(names.begin(), names.end(), "manifest.json") != names.end());
    for (const std::string& name : names) {
      INFO(name);
      CHECK(name.find(".tmp.") == std::string::npos);  // no temporary file left behind
      CHECK(slurp(a / name) == slurp(b / name));
    }
    if (std::string(format) == "safetensors") CHECK(names.size() == 2);
    if (std::string(format) == "npy") CHECK(names.size() > 100);
  }
}

TEST_CASE("run --golden: bad usage exits 2 and writes nothing", "[compare]") {
  TempDir dir;
  const std::string s = scenario("layernorm_sequence_sharded.toml");
  CliResult r = run_cli("run --quiet " + s + " --golden " + q(dir.path() / "no" / "such" / "dir"));
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("does not exist") != std::string::npos);
  r = run_cli("run --quiet " + s + " --format npy");
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--format needs --golden DIR") != std::string::npos);
  r = run_cli("run --quiet " + s + " --golden " + q(dir.path() / "g") + " --format hdf5");
  CHECK(r.exit_code == 2);
  r = run_cli("run --quiet " + s + " --golden " + q(dir.path() / "g") + " --reference mp7");
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("invalid precision 'mp7'") != std::string::npos);
  CHECK(entries(dir.path()).empty());
}

TEST_CASE("compare: goldens against themselves pass, in both formats", "[compare]") {
  TempDir dir;
  const fs::path golden = write_goldens(dir);
  CliResult r = run_cli("compare " + q(golden) + " " + q(golden / "goldens.safetensors"));
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("compared 30 tensor(s) against mp256 goldens: 30 within tolerance, 0 outside") !=
        std::string::npos);
  // The same goldens as a folder of .npy files (a backend without a safetensors writer).
  const fs::path npy = dir.path() / "npy";
  REQUIRE(run_cli("run --quiet " + scenario("layernorm_sequence_sharded.toml") + " --golden " +
                  q(npy) + " --dtype f32 --format npy")
              .exit_code == 0);
  r = run_cli("compare " + q(golden) + " " + q(npy) + " --rtol 0 --atol 0");
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("30 within tolerance, 0 outside") != std::string::npos);
}

TEST_CASE("compare: the worst element is named by axis and owning rank, exit 1 outside",
          "[compare]") {
  TempDir dir;
  const fs::path golden = write_goldens(dir);
  const GoldenDir loaded = load_golden_dir(golden.string());
  // Candidate: the global y, with element [batch=1, seq=12, hidden=5] moved by 3 f32 ulps. Token
  // 12 of 13 lives on rank 3 (chunk split 4,4,4,1 owns seq[12:13)).
  RawTensor y = loaded.tensors.at("f32/s1/c1/y");
  std::vector<double> values = raw_values(y);
  const std::size_t flat = (1 * 13 + 12) * 16 + 5;
  float bumped = static_cast<float>(values[flat]);
  for (int i = 0; i < 3; ++i) bumped = std::nextafter(bumped, INFINITY);
  std::vector<float> as_float(values.begin(), values.end());
  as_float[flat] = bumped;
  const fs::path candidate = dir.path() / "candidate.safetensors";
  spit(candidate, encode_safetensors({raw_f32("f32/s1/c1/y", y.shape, as_float)}, {}));

  CliResult r = run_cli("compare " + q(golden) + " " + q(candidate) + " --max-ulp 2");
  CHECK(r.exit_code == 1);
  CHECK(r.out.find("FAIL  f32/s1/c1/y") != std::string::npos);
  CHECK(r.out.find("worst [batch=1, seq=12, hidden=5] rank 3") != std::string::npos);
  CHECK(r.out.find("(3 ulp)") != std::string::npos);
  CHECK(r.out.find("29 golden tensor(s) not in the candidate") != std::string::npos);
  r = run_cli("compare " + q(golden) + " " + q(candidate) + " --max-ulp 3");
  CHECK(r.exit_code == 0);

  // A NaN at [batch=0, seq=5, hidden=0] (rank 1's shard seq[4:8)) never matches.
  as_float[flat] = static_cast<float>(values[flat]);
  as_float[5 * 16] = NAN;
  spit(candidate, encode_safetensors({raw_f32("f32/s1/c1/y", y.shape, as_float)}, {}));
  r = run_cli("compare " + q(golden) + " " + q(candidate) + " --max-ulp 1000000");
  CHECK(r.exit_code == 1);
  CHECK(r.out.find("1 non-finite candidate value(s)") != std::string::npos);
  CHECK(r.out.find("[batch=0, seq=5, hidden=0] rank 1: nan") != std::string::npos);

  // A shard: rank 3's local index 0 is global seq 12.
  RawTensor shard = loaded.tensors.at("f32/s1/c1/y@rank3[seq=12:13]");
  std::vector<double> sv = raw_values(shard);
  std::vector<float> sf(sv.begin(), sv.end());
  sf[16 + 7] = std::nextafter(sf[16 + 7], INFINITY);
  spit(candidate, encode_safetensors({raw_f32("mine", shard.shape, sf)}, {}));
  r = run_cli("compare " + q(golden) + " " + q(candidate) +
              " --rtol 0 --map 'f32/s1/c1/y@rank3[seq=12:13]=mine'");
  CHECK(r.exit_code == 1);
  CHECK(r.out.find("(candidate 'mine')") != std::string::npos);
  CHECK(r.out.find("worst [batch=1, seq=12, hidden=7] rank 3") != std::string::npos);
}

TEST_CASE("compare: bad input exits 2 with a clear message", "[compare]") {
  TempDir dir;
  const fs::path golden = write_goldens(dir);
  const std::string good = slurp(golden / "goldens.safetensors");
  const fs::path candidate = dir.path() / "c.safetensors";
  auto expect_2 = [&](const std::string& bytes, const std::string& what,
                      const std::string& extra = "") {
    spit(candidate, bytes);
    const CliResult r = run_cli("compare " + q(golden) + " " + q(candidate) + extra);
    INFO("stderr: " << r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(what) != std::string::npos);
    CHECK(r.out.empty());
  };
  expect_2(good.substr(0, good.size() - 1), "truncated file");
  expect_2(good.substr(0, 5), "shorter than the 8-byte header length");
  std::string past_end = good;
  past_end[7] = '\x7f';
  expect_2(past_end, "runs past the end");
  expect_2(encode_safetensors({raw_f32("nothing/matches", {1}, {1.0f})}, {}),
           "no candidate tensor matches a golden name");
  expect_2(good, "--map nope=x: no golden tensor named 'nope'", " --map nope=x");
  // A corrupted golden: one data byte flipped breaks its SHA-256.
  std::string corrupt = good;
  corrupt[corrupt.size() - 1] ^= 0x01;
  spit(golden / "goldens.safetensors", corrupt);
  const CliResult r = run_cli("compare " + q(golden) + " " + q(golden / "goldens.safetensors"));
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("SHA-256 of its bytes does not match the manifest") != std::string::npos);
  CHECK(run_cli("compare " + q(golden)).exit_code == 2);
  CHECK(run_cli("compare " + q(dir.path() / "nope") + " " + q(candidate)).exit_code == 2);
}
