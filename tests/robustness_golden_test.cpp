// Goldens and candidates in `shardsim compare`: every hostile candidate file exits 2
// with one message naming the file and the defect, writes nothing, and never crashes; NaN and
// Inf candidate values are reported by position and never match a finite golden. The decoder
// level is covered in golden_test.cpp; this is the end-to-end contract through the CLI.
#include <cmath>
#include <cstdint>
#include <limits>

#include "cli_test_support.hpp"
#include "golden/golden_set.hpp"

using namespace cli_test;
using namespace shardsim;

namespace {

std::string le64(std::uint64_t v) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return bytes;
}

std::string safetensors(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

// f32 goldens of the sequence-sharded LayerNorm, written once per test case.
fs::path make_goldens(const TempDir& dir) {
  const fs::path golden = dir.path() / "golden";
  const CliResult r = run_cli("run --quiet " + q(source_scenario("layernorm_sequence_sharded.toml")) +
                              " --golden " + q(golden) + " --dtype f32");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return golden;
}

}  // namespace

TEST_CASE("robustness: hostile candidates in compare exit 2 naming the file", "[robustness]") {
  TempDir dir;
  const fs::path golden = make_goldens(dir);
  const std::vector<std::string> golden_files = entries(golden);
  const fs::path candidate = dir.path() / "c.safetensors";
  const std::string y = "f32/s1/c1/y";  // [batch=2, seq=13, hidden=16]: 416 floats, 1664 bytes
  const std::string data(1664, '\0');
  auto expect_2 = [&](const std::string& bytes, const std::string& what) {
    std::ofstream(candidate, std::ios::binary | std::ios::trunc) << bytes;
    const CliResult r = run_cli("compare " + q(golden) + " " + q(candidate));
    INFO("stderr: " << r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.rfind("shardsim: error: ", 0) == 0);
    CHECK(r.err.find(candidate.string()) != std::string::npos);
    CHECK(r.err.find(what) != std::string::npos);
    CHECK(r.out.empty());
    // compare writes nothing: the golden directory and the scratch directory are unchanged.
    CHECK(entries(golden) == golden_files);
    CHECK(entries(dir.path()) == std::vector<std::string>{"c.safetensors", "golden"});
  };
  const std::string entry = "\"" + y + "\":{\"dtype\":\"F32\",\"shape\":[2,13,16],";
  SECTION("truncated") {
    expect_2(safetensors("{" + entry + "\"data_offsets\":[0,1664]}}", data.substr(0, 1000)), "truncated");
  }
  SECTION("a header length larger than the file") {
    expect_2(le64(1u << 20) + "{}", "runs past the end");
  }
  SECTION("invalid JSON") { expect_2(safetensors("{" + entry, data), "invalid JSON"); }
  SECTION("overlapping data_offsets") {
    expect_2(safetensors("{" + entry + "\"data_offsets\":[0,1664]},\"b\":{\"dtype\":\"F32\",\"shape\":[1],"
                         "\"data_offsets\":[1660,1664]}}",
                         data),
             "overlaps");
  }
  SECTION("gapped data_offsets") {
    expect_2(safetensors("{" + entry + "\"data_offsets\":[4,1668]}}", data + "1234"), "hole");
  }
  SECTION("a dtype not in the spec") {
    expect_2(safetensors("{\"" + y + "\":{\"dtype\":\"F15\",\"shape\":[2,13,16],\"data_offsets\":[0,1664]}}", data),
             "unknown dtype");
  }
  SECTION("a shape whose byte size disagrees with its offsets") {
    expect_2(safetensors("{\"" + y + "\":{\"dtype\":\"F32\",\"shape\":[2,13,15],\"data_offsets\":[0,1664]}}", data),
             "shape/size mismatch");
  }
  SECTION("duplicate names") {
    expect_2(safetensors("{" + entry + "\"data_offsets\":[0,832]}," + entry + "\"data_offsets\":[832,1664]}}", data),
             "duplicate");
  }
  SECTION("a non-string __metadata__ value") {
    expect_2(safetensors("{\"__metadata__\":{\"k\":[1]}," + entry + "\"data_offsets\":[0,1664]}}", data),
             "values must be strings");
  }
  SECTION("a hostile npy candidate") {
    const fs::path npy = dir.path() / "c.npy";
    std::string bytes = encode_npy(raw_f32("", {2, 13, 16}, std::vector<float>(416, 0.0f)));
    bytes.resize(bytes.size() - 3);
    std::ofstream(npy, std::ios::binary) << bytes;
    const CliResult r = run_cli("compare " + q(golden) + " " + q(npy) + " --map " + q(y + "=c"));
    INFO("stderr: " << r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(npy.string()) != std::string::npos);
    CHECK(r.out.empty());
  }
}

TEST_CASE("robustness: NaN and Inf candidates are reported by position and never match",
          "[robustness]") {
  TempDir dir;
  const fs::path golden = make_goldens(dir);
  const GoldenDir loaded = load_golden_dir(golden.string());
  const RawTensor y = loaded.tensors.at("f32/s1/c1/y");
  const std::vector<double> values = raw_values(y);
  const fs::path candidate = dir.path() / "c.safetensors";
  // Flat index of [batch=1, seq=12, hidden=5] is (1 * 13 + 12) * 16 + 5 = 405; seq 12 is on
  // rank 3 (split 4,4,4,1). Every golden value is finite, so no tolerance may accept these.
  const std::size_t flat = 405;
  for (const float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN()}) {
    INFO("candidate value " << bad);
    REQUIRE(std::isfinite(values[flat]));
    std::vector<float> v(values.begin(), values.end());
    v[flat] = bad;
    std::ofstream(candidate, std::ios::binary | std::ios::trunc)
        << encode_safetensors({raw_f32("f32/s1/c1/y", y.shape, v)}, {});
    // The loosest tolerances the CLI takes still never let a non-finite value match.
    const CliResult r = run_cli("compare " + q(golden) + " " + q(candidate) +
                                " --rtol 1e300 --atol 1e300 --max-ulp 1e300");
    INFO("stdout: " << r.out << "\nstderr: " << r.err);
    CHECK(r.exit_code == 1);
    CHECK(r.out.find("1 non-finite candidate value(s)") != std::string::npos);
    CHECK(r.out.find("[batch=1, seq=12, hidden=5] rank 3") != std::string::npos);
  }
}
