// BF16 and F16 goldens (run --golden --dtype) and BF16/F16 candidates (compare): values rounded
// once from the reference, the npy form of bf16, ULP distance in the narrow format, and the bad
// inputs that are located errors (exit 2).
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "cli_test_support.hpp"
#include "golden/golden_set.hpp"

using namespace shardsim;
using cli_test::q;
using cli_test::run_cli;
using cli_test::TempDir;

namespace {

// x = [1 + 2^-8 + 2^-30, 2, 3, 5] from an F64 file, one LayerNorm row on 2 ranks.
const std::string kScenario = R"toml(name = "narrow_golden"
precisions = ["f64"]

[mesh]
ranks = 2

[[tensors]]
name = "x"
axes = ["seq", "hidden"]
shape = [1, 4]
init = { file = "x.npy" }
placement = "Shard(seq)"

[[steps]]
op = "layer_norm"
input = "x"
output = "y"
eps = 0.0
)toml";

std::string write_scenario(const TempDir& dir) {
  dir.write("x.npy", encode_npy(raw_f64("x", {1, 4}, {1.0 + 0x1p-8 + 0x1p-30, 2, 3, 5})));
  return q(dir.write("s.toml", kScenario));
}

std::vector<std::uint16_t> bits16(const RawTensor& t) {
  std::vector<std::uint16_t> out;
  for (std::size_t i = 0; i + 1 < t.bytes.size(); i += 2) {
    out.push_back(static_cast<std::uint16_t>(static_cast<unsigned char>(t.bytes[i]) |
                                             static_cast<unsigned char>(t.bytes[i + 1]) << 8));
  }
  return out;
}

}  // namespace

TEST_CASE("narrow goldens: BF16 and F16 are rounded once from the mp256 reference",
          "[narrow_golden]") {
  // x[0] = 1 + 2^-8 + 2^-30 is exact in the mp256 run. Rounded once: bf16 1 + 2^-7 (0x3f81,
  // above the midpoint 1 + 2^-8); f16 keeps 11 bits, spacing 2^-10 at 1, so 1 + 2^-8 (0x3c04)
  // with 2^-30 below half a unit. The F32 golden is 1 + 2^-8 (2^-30 is below f32's half unit,
  // 2^-24), and rounding that to bf16 would tie to even: 1.0 (0x3f80). So 0x3f81 proves the
  // BF16 golden does not come from the F32 one.
  TempDir dir;
  const std::string scenario = write_scenario(dir);
  const auto run =
      run_cli("run " + scenario + " -q --golden " + q(dir.path() / "g") + " --dtype all");
  REQUIRE(run.exit_code == 0);
  const GoldenDir golden = load_golden_dir((dir.path() / "g").string());
  const RawTensor& bf16 = golden.tensors.at("bf16/inputs/x");
  const RawTensor& f16 = golden.tensors.at("f16/inputs/x");
  CHECK(bf16.dtype == format::Dtype::bf16);
  CHECK(f16.dtype == format::Dtype::f16);
  CHECK(bits16(bf16) == std::vector<std::uint16_t>{0x3f81, 0x4000, 0x4040, 0x40a0});
  CHECK(bits16(f16) == std::vector<std::uint16_t>{0x3c04, 0x4000, 0x4200, 0x4500});
  CHECK(raw_values(golden.tensors.at("f32/inputs/x")).at(0) == 1.0 + 0x1p-8);
  // y = LayerNorm(x): its BF16 golden holds the bf16 roundings of the reference's y.
  CHECK(golden.tensors.count("bf16/s1/c1/y") == 1);
  const auto manifest = nlohmann::json::parse(cli_test::slurp(dir.path() / "g" / "manifest.json"));
  CHECK(manifest["dtypes"] == nlohmann::json({"f64", "f32", "bf16", "f16"}));
}

TEST_CASE("narrow goldens: bf16 in npy is '<u2' bit patterns, read back as BF16",
          "[narrow_golden]") {
  TempDir dir;
  const std::string scenario = write_scenario(dir);
  REQUIRE(run_cli("run " + scenario + " -q --golden " + q(dir.path() / "g") +
                  " --format npy --dtype bf16,f16")
              .exit_code == 0);
  const RawTensor file = read_npy((dir.path() / "g" / "bf16__inputs__x.npy").string());
  CHECK(file.dtype == format::Dtype::u16);
  CHECK(bits16(file) == std::vector<std::uint16_t>{0x3f81, 0x4000, 0x4040, 0x40a0});
  CHECK(read_npy((dir.path() / "g" / "f16__inputs__x.npy").string()).dtype == format::Dtype::f16);
  const GoldenDir golden = load_golden_dir((dir.path() / "g").string());
  CHECK(golden.tensors.at("bf16/inputs/x").dtype == format::Dtype::bf16);
  // The golden directory is its own candidate: U16 files against BF16 goldens are bit patterns.
  const auto self =
      run_cli("compare " + q(dir.path() / "g") + " " + q(dir.path() / "g") + " --max-ulp 0");
  CHECK(self.exit_code == 0);
}

TEST_CASE("narrow goldens: a BF16 candidate 1 ulp off is 1 ulp away", "[narrow_golden]") {
  TempDir dir;
  const std::string scenario = write_scenario(dir);
  REQUIRE(run_cli("run " + scenario + " -q --golden " + q(dir.path() / "g") + " --dtype bf16")
              .exit_code == 0);
  const GoldenDir golden = load_golden_dir((dir.path() / "g").string());
  // y's bf16 golden is [0xbf97, 0xbf02, 0x3e2d, 0x3fc3] with x[0] = 1 (narrow_run_test.cpp);
  // whatever its bits here, the candidate moves element 2 one pattern up (away from zero for a
  // positive value: the next bf16).
  RawTensor y = golden.tensors.at("bf16/s1/c1/y");
  y.name = "bf16/s1/c1/y";
  std::vector<std::uint16_t> bits = bits16(y);
  REQUIRE(bits.at(2) < 0x8000);
  bits[2] += 1;
  const RawTensor off = raw_bits16(y.name, format::Dtype::bf16, y.shape, bits);
  dir.write("cand.safetensors", encode_safetensors({off}, {}));
  const std::string golden_dir = q(dir.path() / "g");
  const std::string candidate = q(dir.path() / "cand.safetensors");
  const auto strict = run_cli("compare " + golden_dir + " " + candidate + " --max-ulp 0");
  CHECK(strict.exit_code == 1);
  CHECK(strict.out.find("FAIL  bf16/s1/c1/y  BF16 [1, 4]") != std::string::npos);
  CHECK(strict.out.find("max_ulp 1 ") != std::string::npos);
  CHECK(strict.out.find("worst [seq=0, hidden=2]") != std::string::npos);
  CHECK(run_cli("compare " + golden_dir + " " + candidate + " --max-ulp 1").exit_code == 0);
  // Default BF16 tolerance (torch.testing's rtol 1.6e-2): one ulp is at most 2^-7 relative.
  CHECK(run_cli("compare " + golden_dir + " " + candidate).exit_code == 0);
}

TEST_CASE("narrow goldens: bad dtypes are located errors with no output", "[narrow_golden]") {
  TempDir dir;
  const std::string scenario = write_scenario(dir);
  const auto bad_flag =
      run_cli("run " + scenario + " -q --golden " + q(dir.path() / "bad") + " --dtype bf16,e5m2");
  CHECK(bad_flag.exit_code == 2);
  CHECK(bad_flag.err.find("--dtype: expected a comma-separated list of f64, f32, bf16 and f16, "
                          "or both (f64,f32) or all, got 'bf16,e5m2'") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir.path() / "bad"));

  REQUIRE(run_cli("run " + scenario + " -q --golden " + q(dir.path() / "g") +
                  " --format npy --dtype bf16")
              .exit_code == 0);
  // An integer candidate for a BF16 golden (other than U16 bit patterns).
  dir.write(
      "cand.safetensors",
      encode_safetensors(
          {RawTensor{"bf16/inputs/x", format::Dtype::i32, {1, 4}, std::string(16, '\0')}}, {}));
  const auto integer =
      run_cli("compare " + q(dir.path() / "g") + " " + q(dir.path() / "cand.safetensors"));
  CHECK(integer.exit_code == 2);
  CHECK(integer.err.find("candidate tensor 'bf16/inputs/x' is I32, but golden 'bf16/inputs/x' is "
                         "BF16: expected a floating-point tensor") != std::string::npos);
  // A golden npy file whose dtype is not the manifest's (F16 where it says BF16).
  dir.write("g/bf16__inputs__x.npy", encode_npy(raw_bits16("x", format::Dtype::f16, {1, 4},
                                                           {0x3c00, 0x4000, 0x4200, 0x4500})));
  const auto swapped = run_cli("compare " + q(dir.path() / "g") + " " + q(dir.path() / "g"));
  CHECK(swapped.exit_code == 2);
  CHECK(swapped.err.find("bf16__inputs__x.npy: tensor 'bf16/inputs/x' is F16, the manifest says "
                         "BF16") != std::string::npos);
}
