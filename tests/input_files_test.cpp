// Inputs from files (init = { file, tensor }): values reach every precision exactly (an f32 run
// rounds F64 values once, to nearest even), BF16/F16/F32/F64 and npy are read exactly, shapes,
// dtypes and non-finite values are located errors, hostile files are rejected like `compare`
// rejects them, and the golden manifest names every file by its SHA-256.
#include <sys/stat.h>

#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <nlohmann/json.hpp>

#include "cli_test_support.hpp"
#include "core/error.hpp"
#include "golden/golden_set.hpp"
#include "core/sha256.hpp"

using namespace shardsim;
using cli_test::TempDir;

namespace {

// x: [batch=1, seq=2, hidden=3] over 2 ranks, LayerNorm of it. FILE_INIT is replaced.
const std::string kScenario = R"toml(name = "from_file"
precisions = ["f64"]

[mesh]
ranks = 2

[[tensors]]
name = "x"
axes = ["batch", "seq", "hidden"]
shape = [1, 2, 3]
init = FILE_INIT
placement = "Shard(seq)"

[[steps]]
op = "layer_norm"
input = "x"
output = "y"
)toml";

// Line 11, column 8 of kScenario is the init table.
const std::string kInitAt = "s.toml:11:8: tensors[0].init";

std::string scenario_with(const std::string& init) {
  return cli_test::replaced(kScenario, "FILE_INIT", init);
}

RawTensor raw_bits(std::string name, format::Dtype dtype, std::vector<std::int64_t> shape,
                   const std::vector<std::uint16_t>& bits) {
  RawTensor t{std::move(name), dtype, std::move(shape), {}};
  for (std::uint16_t b : bits) {
    t.bytes += static_cast<char>(b & 0xff);
    t.bytes += static_cast<char>(b >> 8);
  }
  return t;
}

// Six F64 values, three of them not f32-representable, two exactly halfway between floats.
//   1 + 2^-24      halfway between 1 and 1 + 2^-23: nearest even is 1
//   1 + 3 * 2^-24  halfway between 1 + 2^-23 and 1 + 2^-22: nearest even is 1 + 2^-22
//   0.1            (double) rounds to float(0.1) = 0x1.99999ap-4
const std::vector<double> kF64 = {1.0 + 0x1p-24, 1.0 + 0x3p-24, 0.1, -2.5, 0x1p-30, 3.0};
const std::vector<float> kF64AsF32 = {1.0f, 1.0f + 0x1p-22f, 0x1.99999ap-4f, -2.5f, 0x1p-30f, 3.0f};

std::string f64_file() {
  return encode_safetensors({raw_f64("x", {1, 2, 3}, kF64), raw_f64("other", {2}, {5.0, 6.0})}, {});
}

RunReport captured(const Scenario& scenario, const std::string& precision) {
  RunOptions options;
  options.capture_tensors = true;
  return evaluate(scenario, parse_precision(precision), options);
}

// The input boundary of tensor x (boundary 0).
const BoundaryResult& input_x(const RunReport& run) {
  REQUIRE(run.boundaries.at(0).entry.tensor == "x");
  REQUIRE(run.boundaries.at(0).entry.kind == BoundaryKind::input);
  return run.boundaries.at(0);
}

std::string load_error(const TempDir& dir, const std::string& init) {
  const auto path = dir.write("s.toml", scenario_with(init));
  try {
    load_scenario(path.string());
  } catch (const InputError& e) {
    const std::string message = e.what();
    // Located at the scenario file, line:col, key path; strip the directory.
    return message.substr(message.find("s.toml:"));
  }
  FAIL("the scenario loaded");
  return "";
}

}  // namespace

TEST_CASE("input files: F64 values are exact at f64 and mp256, rounded once to nearest at f32",
          "[input_files]") {
  TempDir dir;
  dir.write("in.safetensors", f64_file());
  const auto path =
      dir.write("s.toml", scenario_with(R"({ file = "in.safetensors", tensor = "x" })"));
  const Scenario scenario = load_scenario(path.string());
  REQUIRE(scenario.tensors[0].init.dist == InitDist::file);
  CHECK(scenario.tensors[0].init.file_dtype == "F64");

  for (const char* precision : {"f64", "mp256"}) {
    INFO(precision);
    const RunReport run = captured(scenario, precision);
    CHECK(run.pass);
    const BoundaryResult& x = input_x(run);
    CHECK(x.captured->dense.f64 == kF64);  // bitwise: the file's doubles, unchanged
    CHECK(x.entry.notes.empty());
    // Rank 1 holds token 1 (seq[1:2)): the file's elements 3, 4, 5.
    CHECK(x.captured->ranks[1].f64 == std::vector<double>{-2.5, 0x1p-30, 3.0});
  }
  const RunReport f32 = captured(scenario, "f32");
  const BoundaryResult& x = input_x(f32);
  CHECK(x.captured->dense.f32 == kF64AsF32);
  REQUIRE(x.entry.notes.size() == 1);
  // |float(0.1) - 0.1| / 0.1 = 1.49e-8; |1 - (1 + 2^-24)| / (1 + 2^-24) = 5.96e-8 is the largest.
  CHECK(x.entry.notes[0] ==
        "f32 run: 3 of 6 F64 values from 'in.safetensors' rounded once to nearest f32 (max "
        "relative change 6e-08)");
  CHECK(f32.pass);
}

TEST_CASE("input files: BF16, F16 and F32 safetensors and F32 npy values are read exactly",
          "[input_files]") {
  TempDir dir;
  // BF16 is the top half of an f32: 0x3fc0 = 1.5, 0xc120 = -10, 0x0001 = 2^-133 (smallest
  // subnormal), 0x4049 = 3.140625, 0xbf80 = -1, 0x0000 = 0.
  // F16: 0x3c00 = 1, 0x0001 = 2^-24 (smallest subnormal), 0x7bff = 65504 (largest),
  // 0xc000 = -2, 0x3555 = 0x1.554p-2, 0x8000 = -0.
  dir.write("in.safetensors",
            encode_safetensors({raw_bits("b", format::Dtype::bf16, {1, 2, 3},
                                         {0x3fc0, 0xc120, 0x0001, 0x4049, 0xbf80, 0x0000}),
                                raw_bits("h", format::Dtype::f16, {1, 2, 3},
                                         {0x3c00, 0x0001, 0x7bff, 0xc000, 0x3555, 0x8000}),
                                raw_f32("f", {1, 2, 3}, {0.1f, -0.0f, 1e-40f, 7, 8, 9})},
                               {}));
  dir.write("x.npy", encode_npy(raw_f32("", {1, 2, 3}, {0.25f, 1e-45f, -3.5f, 1, 2, 4})));
  struct Case {
    std::string init;
    std::string dtype;
    std::vector<double> values;
  };
  const std::vector<Case> cases = {
      {R"({ file = "in.safetensors", tensor = "b" })",
       "BF16",
       {1.5, -10.0, 0x1p-133, 3.140625, -1.0, 0.0}},
      {R"({ file = "in.safetensors", tensor = "h" })",
       "F16",
       {1.0, 0x1p-24, 65504.0, -2.0, 0x1.554p-2, -0.0}},
      {R"({ file = "in.safetensors", tensor = "f" })",
       "F32",
       {double(0.1f), -0.0, double(1e-40f), 7, 8, 9}},
      {R"({ file = "x.npy" })", "F32", {0.25, double(1e-45f), -3.5, 1, 2, 4}},
  };
  for (const Case& c : cases) {
    INFO(c.init);
    const auto path = dir.write("s.toml", scenario_with(c.init));
    const Scenario scenario = load_scenario(path.string());
    CHECK(scenario.tensors[0].init.file_dtype == c.dtype);
    const std::vector<double> got = input_x(captured(scenario, "f64")).captured->dense.f64;
    REQUIRE(got.size() == c.values.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      CHECK(std::bit_cast<std::uint64_t>(got[i]) == std::bit_cast<std::uint64_t>(c.values[i]));
    }
    // Every value is an f32: the f32 run holds the same values and notes nothing.
    const RunReport run32 = captured(scenario, "f32");
    const BoundaryResult& x32 = input_x(run32);
    CHECK(x32.entry.notes.empty());
    for (std::size_t i = 0; i < got.size(); ++i)
      CHECK(double(x32.captured->dense.f32[i]) == got[i]);
  }
}

TEST_CASE("input files: paths are relative to the scenario file's directory", "[input_files]") {
  TempDir dir;
  std::filesystem::create_directories(dir.path() / "data");
  dir.write("data/in.safetensors", f64_file());
  const auto path =
      dir.write("s.toml", scenario_with(R"({ file = "data/in.safetensors", tensor = "x" })"));
  // Run from another working directory: the CLI resolves against the scenario, not the cwd.
  const cli_test::CliResult result =
      cli_test::run_cli("run --quiet " + cli_test::q(path), "cd / &&");
  CHECK(result.err.empty());
  CHECK(result.exit_code == 0);
}

TEST_CASE("input files: the golden manifest names each file by its SHA-256", "[input_files]") {
  TempDir dir;
  const std::string bytes = f64_file();
  dir.write("in.safetensors", bytes);
  std::string text = scenario_with(R"({ file = "in.safetensors", tensor = "x" })");
  text = cli_test::replaced(text, "[[steps]]", R"([[tensors]]
name = "ln.weight"
role = "parameter"
axes = ["hidden"]
shape = [3]

[[steps]]
weight = "ln.weight")");
  const auto path = dir.write("s.toml", text);
  const Scenario scenario = load_scenario(path.string());
  const GoldenSet set = build_goldens(scenario, captured(scenario, "mp256"), {});
  const auto manifest = nlohmann::json::parse(set.manifest);
  const auto& files = manifest["scenario"]["input_files"];
  REQUIRE(files.size() == 1);  // ln.weight is drawn, not read
  CHECK(files[0]["tensor"] == "x");
  CHECK(files[0]["file"] == "in.safetensors");
  CHECK(files[0]["file_tensor"] == "x");
  CHECK(files[0]["dtype"] == "F64");
  CHECK(files[0]["sha256"] == sha256_hex(bytes));
  // The F64 golden of the input is the file's values, bit for bit.
  for (const GoldenEntry& e : set.entries) {
    if (e.tensor.name == "f64/inputs/x") CHECK(raw_values(e.tensor) == kF64);
  }
  // A scenario without file inputs has no "input_files" key (older golden sets are unchanged).
  const Scenario drawn = parse_scenario(cli_test::kTiny, "tiny.toml");
  const auto plain =
      nlohmann::json::parse(build_goldens(drawn, captured(drawn, "f64"), {}).manifest);
  CHECK_FALSE(plain["scenario"].contains("input_files"));
}

TEST_CASE("input files: located errors for shape, dtype, values, names and keys", "[input_files]") {
  TempDir dir;
  std::vector<double> with_nan = kF64;
  with_nan[4] = std::nan("");
  std::vector<double> with_inf = kF64;
  with_inf[2] = -INFINITY;
  RawTensor ints{"i", format::Dtype::i32, {1, 2, 3}, std::string(24, '\0')};
  dir.write("in.safetensors",
            encode_safetensors(
                {raw_f64("x", {1, 2, 3}, kF64), raw_f64("wide", {1, 3, 2}, kF64),
                 raw_f64("nan", {1, 2, 3}, with_nan), raw_f64("inf", {1, 2, 3}, with_inf), ints},
                {}));
  dir.write("x.npy", encode_npy(raw_f64("", {6}, kF64)));
  dir.write("in.bin", "whatever");
  const std::string prefix = kInitAt;
  CHECK(load_error(dir, R"({ file = "in.safetensors", tensor = "wide" })") ==
        prefix +
            ": 'wide' in 'in.safetensors' has shape [1, 3, 2], but 'x' declares "
            "[batch=1, seq=2, hidden=3]");
  CHECK(load_error(dir, R"({ file = "x.npy" })") ==
        prefix + ": 'x.npy' has shape [6], but 'x' declares [batch=1, seq=2, hidden=3]");
  CHECK(load_error(dir, R"({ file = "in.safetensors", tensor = "nan" })") ==
        "s.toml:11:44: tensors[0].init.tensor: element [0, 1, 1] of 'nan' in 'in.safetensors' is "
        "nan: inputs must be finite");
  CHECK(load_error(dir, R"({ file = "in.safetensors", tensor = "inf" })") ==
        "s.toml:11:44: tensors[0].init.tensor: element [0, 0, 2] of 'inf' in 'in.safetensors' is "
        "-inf: inputs must be finite");
  CHECK(load_error(dir, R"({ file = "in.safetensors", tensor = "i" })") ==
        "s.toml:11:44: tensors[0].init.tensor: 'i' in 'in.safetensors' has dtype I32; inputs are "
        "read exactly from F64, F32, BF16 or F16 (token ids: declare the tensor dtype = \"i64\")");
  CHECK(load_error(dir, R"({ file = "in.safetensors", tensor = "wid" })") ==
        "s.toml:11:44: tensors[0].init.tensor: no tensor 'wid' in 'in.safetensors' (did you mean "
        "'wide'?)");
  CHECK(load_error(dir, R"({ file = "in.safetensors" })") ==
        prefix + ": a safetensors file needs 'tensor', the tensor's name");
  CHECK(load_error(dir, R"({ file = "x.npy", tensor = "x" })") ==
        "s.toml:11:35: tensors[0].init.tensor: an .npy file holds one unnamed tensor: omit "
        "'tensor' for 'x.npy'");
  CHECK(load_error(dir, R"({ file = "in.safetensors", tensor = "x", dist = "normal" })") ==
        "s.toml:11:49: tensors[0].init.dist: unknown key 'dist'");
  const std::string bin = load_error(dir, R"({ file = "in.bin" })");
  CHECK(bin.find("tensors[0].init.file: '") != std::string::npos);
  CHECK(bin.find("in.bin' is neither a .safetensors nor a .npy file") != std::string::npos);
  // A FIFO is refused before it is opened (reading it would block forever).
  REQUIRE(::mkfifo((dir.path() / "fifo.npy").c_str(), 0600) == 0);
  const std::string fifo = load_error(dir, R"({ file = "fifo.npy" })");
  CHECK(fifo.find("s.toml:11:17: tensors[0].init.file: '") == 0);
  CHECK(fifo.find("fifo.npy' is not a regular file") != std::string::npos);
  const std::string missing = load_error(dir, R"({ file = "none.npy" })");
  CHECK(missing.find("s.toml:11:17: tensors[0].init.file: ") == 0);
  CHECK(missing.find("none.npy: cannot open: No such file or directory") != std::string::npos);
}

TEST_CASE("input files: hostile files are rejected as `compare` rejects them", "[input_files]") {
  TempDir dir;
  const std::string bytes = f64_file();
  struct Case {
    std::string name;
    std::string bytes;
    std::string what;
  };
  std::string huge_header = bytes;
  huge_header[5] = '\x7f';  // header length claims ~2^47 bytes: refused before any allocation
  const std::vector<Case> cases = {
      {"truncated", bytes.substr(0, bytes.size() - 1), "past the end"},
      {"trailing", bytes + "x", "data section"},
      {"huge_header", huge_header, "header"},
      {"empty", "", ""},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    dir.write(c.name + ".safetensors", c.bytes);
    const std::string message =
        load_error(dir, "{ file = \"" + c.name + ".safetensors\", tensor = \"x\" }");
    INFO(message);
    CHECK(message.find("s.toml:11:17: tensors[0].init.file: ") == 0);
    CHECK(message.find(c.name + ".safetensors: ") != std::string::npos);
    CHECK(message.find(c.what) != std::string::npos);
  }
}
