// Golden tensors: the safetensors and npy codecs (known bytes, round trips, hostile input), the
// golden set built from a run (names, rounding, manifest) and byte-identical replays.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.hpp"
#include "golden/golden_set.hpp"
#include "core/io.hpp"
#include "core/sha256.hpp"

using namespace shardsim;

namespace {

std::string le64(std::uint64_t v) {
  std::string out;
  for (int i = 0; i < 8; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
  return out;
}

// A safetensors file from a raw header text and data bytes (for hand-made hostile files).
std::string safetensors_bytes(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

void expect_rejected(const std::string& bytes, const std::string& what) {
  INFO("expected a rejection mentioning: " << what);
  try {
    decode_safetensors(bytes, "t.safetensors");
    FAIL("accepted a malformed file");
  } catch (const InputError& e) {
    INFO("message: " << e.what());
    CHECK(std::string(e.what()).find("t.safetensors: ") == 0);
    CHECK(std::string(e.what()).find(what) != std::string::npos);
  }
}

void expect_npy_rejected(const std::string& bytes, const std::string& what) {
  INFO("expected a rejection mentioning: " << what);
  try {
    decode_npy(bytes, "t.npy");
    FAIL("accepted a malformed file");
  } catch (const InputError& e) {
    INFO("message: " << e.what());
    CHECK(std::string(e.what()).find(what) != std::string::npos);
  }
}

std::string npy_with_header(const std::string& dict, const std::string& data) {
  std::string header = dict;
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY\x01";
  out += '\0';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  return out + header + data;
}

Scenario source_scenario(const std::string& name) {
  return load_scenario(std::string(SHARDSIM_SOURCE_DIR) + "/scenarios/" + name);
}

RunReport captured_run(const Scenario& scenario, const std::string& precision) {
  RunOptions options;
  options.capture_tensors = true;
  return evaluate(scenario, parse_precision(precision), options);
}

const GoldenEntry* find_entry(const GoldenSet& set, const std::string& name) {
  for (const GoldenEntry& e : set.entries) {
    if (e.tensor.name == name) return &e;
  }
  return nullptr;
}

}  // namespace

TEST_CASE("golden: safetensors bytes of a one-tensor file, derived by hand", "[golden]") {
  // Header {"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}} is 54 bytes; 8 + 54 = 62 is
  // padded with 2 spaces to 64, so N = 56. Data: 1.0f = 0x3f800000 and -2.0f = 0xc0000000,
  // little-endian.
  const std::string bytes = encode_safetensors({raw_f32("a", {2}, {1.0f, -2.0f})}, {});
  const std::string expected = le64(56) +
                               R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})" + "  " +
                               std::string("\x00\x00\x80\x3f\x00\x00\x00\xc0", 8);
  CHECK(bytes == expected);
  const SafetensorsFile file = decode_safetensors(bytes, "a.safetensors");
  REQUIRE(file.tensors.size() == 1);
  CHECK(raw_values(file.tensors[0]) == std::vector<double>{1.0, -2.0});
}

TEST_CASE("golden: safetensors round trip keeps names, dtypes, shapes, bytes and metadata",
          "[golden]") {
  const std::vector<RawTensor> tensors = {
      raw_f64("f64/s1/c1/y", {2, 3}, {1, 2, 3, 4, 5, -0.0}),
      raw_f32("f32/s1/c1/y@rank3[seq=12:13]", {1, 3}, {0.5f, -1.25f, 3.0f}),
      raw_f32("f32/s1/c1/loss", {}, {0.125f}),
      raw_u8("u8/s1/c1/drop.mask", {4}, {0, 1, 1, 0}),
      raw_f32("f32/empty@rank3[seq=13:13]", {2, 0, 3}, {}),
  };
  const std::string bytes = encode_safetensors(tensors, {{"format", "shardsim-goldens"}});
  std::uint64_t header = 0;
  std::memcpy(&header, bytes.data(), 8);
  CHECK((8 + header) % 8 == 0);  // header padded to 8-byte alignment
  const SafetensorsFile file = decode_safetensors(bytes, "rt");
  REQUIRE(file.tensors.size() == tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    CHECK(file.tensors[i].name == tensors[i].name);  // data order is the given order
    CHECK(file.tensors[i].dtype == tensors[i].dtype);
    CHECK(file.tensors[i].shape == tensors[i].shape);
    CHECK(file.tensors[i].bytes == tensors[i].bytes);
  }
  CHECK(file.metadata.at("format") == "shardsim-goldens");
  CHECK(std::signbit(raw_values(file.tensors[0])[5]));  // -0 survives
}

TEST_CASE("golden: hostile safetensors files are rejected with a clear error", "[golden]") {
  const std::string ok_header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string data(8, '\0');
  REQUIRE_NOTHROW(decode_safetensors(safetensors_bytes(ok_header, data), "t"));
  expect_rejected("", "shorter than the 8-byte header length");
  expect_rejected(std::string("\x05\x00\x00", 3), "shorter than the 8-byte header length");
  expect_rejected(le64(1000) + "{}", "header length 1000 runs past the end");
  expect_rejected(le64(UINT64_MAX) + "{}", "runs past the end");
  expect_rejected(safetensors_bytes(ok_header, data.substr(0, 7)), "truncated file");
  expect_rejected(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})",
                                    data),
                  "invalid JSON header");
  expect_rejected(safetensors_bytes("[1, 2]", data), "must be a JSON object");
  expect_rejected(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                    R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                    data),
                  "duplicate key 'a'");
  expect_rejected(safetensors_bytes(R"({"a":{"dtype":"F31","shape":[2],"data_offsets":[0,8]}})", data),
                  "unknown dtype \"F31\"");
  expect_rejected(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data),
                  "shape/size mismatch");
  expect_rejected(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],)"
                                    R"("data_offsets":[0,8]}})",
                                    data),
                  "shape/size mismatch");
  expect_rejected(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data),
                  "expected a non-negative integer");
  expect_rejected(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                    R"("b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})",
                                    data.substr(0, 6)),
                  "overlaps");
  expect_rejected(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", data),
                  "hole in the data section: bytes [0, 4)");
  expect_rejected(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", data),
                  "4 trailing bytes");
  expect_rejected(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", data),
                  "end before they begin");
  expect_rejected(safetensors_bytes(R"({"__metadata__":{"k":1},)"
                                    R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                                    data),
                  "__metadata__.k: values must be strings");
  expect_rejected(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", data),
                  "unknown key 'x'");
  expect_rejected(safetensors_bytes(R"({"a":{"dtype":"F32","data_offsets":[0,8]}})", data),
                  "missing 'shape'");
  expect_rejected(safetensors_bytes(std::string(100, '[') + std::string(100, ']'), ""),
                  "must be a JSON object");
  expect_rejected(safetensors_bytes("{\"a\":" + std::string(100, '[') + std::string(100, ']') + "}", ""),
                  "nested deeper");
}

TEST_CASE("golden: no truncation or byte flip of a valid file crashes the decoders", "[golden]") {
  // A miniature fuzz: every prefix and every single-byte change of two small valid files either
  // decodes or throws InputError (a crash or another exception fails the test).
  const std::string st = encode_safetensors(
      {raw_f64("x", {2}, {1.5, -2}), raw_f32("y", {1, 2}, {3, 4}), raw_u8("m", {3}, {1, 0, 1})},
      {{"k", "v"}});
  const std::string npy = encode_npy(raw_f32("", {2, 3}, {1, 2, 3, 4, 5, 6}));
  auto survive = [](const std::string& bytes, bool is_npy) {
    try {
      if (is_npy) {
        decode_npy(bytes, "f");
      } else {
        decode_safetensors(bytes, "f");
      }
    } catch (const InputError&) {
    }
  };
  for (bool is_npy : {false, true}) {
    const std::string& good = is_npy ? npy : st;
    for (std::size_t n = 0; n < good.size(); ++n) CHECK_NOTHROW(survive(good.substr(0, n), is_npy));
    for (std::size_t i = 0; i < good.size(); ++i) {
      for (unsigned char v : {0x00, 0x01, 0x22, 0x2c, 0x5b, 0x7d, 0x80, 0xff}) {
        std::string bad = good;
        bad[i] = static_cast<char>(v);
        CHECK_NOTHROW(survive(bad, is_npy));
      }
    }
  }
}

TEST_CASE("golden: npy v1.0 bytes, 64-byte aligned, and round trips", "[golden]") {
  // The header dict is 59 bytes; 10 (preamble) + 59 + 1 ('\n') = 70, padded with spaces to 128,
  // so the header length field is 118 and the data starts at byte 128.
  const RawTensor t = raw_f64("", {2, 3}, {1, 2, 3, 4, 5, 6});
  const std::string bytes = encode_npy(t);
  CHECK(bytes.substr(0, 8) == std::string("\x93NUMPY\x01\x00", 8));
  CHECK(static_cast<unsigned char>(bytes[8]) == 118);
  CHECK(bytes[9] == 0);
  CHECK(bytes.substr(10, 59) == "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }");
  CHECK(bytes[127] == '\n');
  CHECK(bytes.size() == 128 + 48);
  const RawTensor back = decode_npy(bytes, "t.npy");
  CHECK(back.dtype == format::Dtype::f64);
  CHECK(back.shape == std::vector<std::int64_t>{2, 3});
  CHECK(back.bytes == t.bytes);
  // 0-d and 1-d tuples: "()" and "(16,)".
  CHECK(encode_npy(raw_f32("", {}, {1.5f})).find("'shape': ()") != std::string::npos);
  CHECK(encode_npy(raw_u8("", {16}, std::vector<double>(16, 1))).find("'descr': '|u1'") !=
        std::string::npos);
  CHECK(encode_npy(raw_u8("", {16}, std::vector<double>(16, 1))).find("(16,)") != std::string::npos);
  for (const RawTensor& r : {raw_f32("", {}, {1.5f}), raw_u8("", {3}, {0, 1, 1})}) {
    CHECK(encode_npy(r).size() % 64 == r.bytes.size() % 64);
    CHECK(decode_npy(encode_npy(r), "r").bytes == r.bytes);
  }
  // Big-endian input is byte-swapped: 1.5f is 0x3fc00000.
  const RawTensor be = decode_npy(
      npy_with_header("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }",
                      std::string("\x3f\xc0\x00\x00", 4)),
      "be.npy");
  CHECK(raw_values(be) == std::vector<double>{1.5});
}

TEST_CASE("golden: hostile npy files are rejected with a clear error", "[golden]") {
  const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  const std::string data(8, '\0');
  REQUIRE_NOTHROW(decode_npy(npy_with_header(dict, data), "t.npy"));
  expect_npy_rejected("\x93NUM", "truncated");
  expect_npy_rejected(std::string("XXNUMPY\x01\x00\x10\x00", 10) + std::string(16, ' '), "not an npy file");
  expect_npy_rejected(npy_with_header(dict, data).substr(0, 40), "runs past the end");
  expect_npy_rejected(npy_with_header(dict, data.substr(0, 6)), "truncated data");
  expect_npy_rejected(npy_with_header(dict, data + "xx"), "trailing bytes");
  expect_npy_rejected(npy_with_header("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", data),
                      "unknown or unsupported dtype '<c8'");
  expect_npy_rejected(npy_with_header("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", data),
                      "fortran_order True");
  expect_npy_rejected(npy_with_header("{'descr': '<f4', 'descr': '<f4', 'shape': (2,), }", data),
                      "duplicate key 'descr'");
  expect_npy_rejected(npy_with_header("{'descr': '<f4', 'fortran_order': False}", data),
                      "needs 'descr', 'fortran_order' and 'shape'");
  expect_npy_rejected(npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }", data),
                      "expected a non-negative integer");
  expect_npy_rejected(npy_with_header("{'descr': '<f4', 'fortran_order': False, "
                                      "'shape': (99999999999, 99999999999), }",
                                      data),
                      "truncated data");
}

TEST_CASE("golden: npy file names", "[golden]") {
  CHECK(npy_file_name("f64/s1/c1/y@rank3[seq=12:13]") == "f64__s1__c1__y@rank3[seq=12:13].npy");
  CHECK(npy_file_name("f32/s1/c1/grad(ln.weight)#1") == "f32__s1__c1__grad(ln.weight)#1.npy");
  CHECK(npy_file_name("a b%") == "a%20b%25.npy");
}

TEST_CASE("golden: the set built from an mp256 run of the sequence-sharded LayerNorm", "[golden]") {
  const Scenario scenario = source_scenario("layernorm_sequence_sharded.toml");
  const RunReport run = captured_run(scenario, "mp256");
  const GoldenSet set = build_goldens(scenario, run, {});
  // Inputs, the global output, and rank 3's one-token shard seq[12:13).
  for (const char* name : {"f64/inputs/x", "f32/inputs/ln.weight", "f64/s1/c1/y", "f32/s1/c1/y",
                           "f64/s1/c1/y@rank0[seq=0:4]", "f64/s1/c1/y@rank3[seq=12:13]",
                           "f64/inputs/ln.bias@rank2[replicate]"}) {
    INFO(name);
    CHECK(find_entry(set, name) != nullptr);
  }
  const GoldenEntry& y = *find_entry(set, "f64/s1/c1/y");
  const GoldenEntry& y3 = *find_entry(set, "f64/s1/c1/y@rank3[seq=12:13]");
  const GoldenEntry& y32 = *find_entry(set, "f32/s1/c1/y");
  CHECK(y.tensor.shape == std::vector<std::int64_t>{2, 13, 16});
  CHECK(y3.tensor.shape == std::vector<std::int64_t>{2, 1, 16});
  CHECK(y3.rank == 3);
  const std::vector<double> global = raw_values(y.tensor);
  const std::vector<double> shard = raw_values(y3.tensor);
  const std::vector<double> global32 = raw_values(y32.tensor);
  // The shard is token 12 of each batch row (exact boundary: bitwise the oracle's values).
  for (int b = 0; b < 2; ++b) {
    for (int h = 0; h < 16; ++h) CHECK(shard[b * 16 + h] == global[(b * 13 + 12) * 16 + h]);
  }
  // F32 is the mp value rounded once: within half an f32 ulp of the (much closer) F64 value.
  for (std::size_t i = 0; i < global.size(); ++i) {
    const double half_ulp = std::ldexp(1.0, std::ilogb(static_cast<float>(global[i])) - 24);
    CHECK(std::fabs(global32[i] - global[i]) <= half_ulp);
  }
  // Data order: every F64 tensor before every F32 tensor.
  bool seen_f32 = false;
  for (const GoldenEntry& e : set.entries) {
    if (e.tensor.dtype == format::Dtype::f32) seen_f32 = true;
    if (e.tensor.dtype == format::Dtype::f64) CHECK_FALSE(seen_f32);
  }
  const auto manifest = nlohmann::json::parse(set.manifest);
  CHECK(manifest["precision"] == "mp256");
  CHECK(manifest["significand_bits"] == 257);
  CHECK(manifest["scenario"]["sha256"] == sha256_hex(scenario.text));
  CHECK(manifest["scenario"]["text"] == scenario.text);
  CHECK(manifest["tensors"].size() == set.entries.size());
  for (std::size_t i = 0; i < set.entries.size(); ++i) {
    CHECK(manifest["tensors"][i]["name"] == set.entries[i].tensor.name);
    CHECK(manifest["tensors"][i]["sha256"] == sha256_hex(set.entries[i].tensor.bytes));
  }
  const auto& m3 = manifest["tensors"][std::distance(&set.entries[0], &y3)];
  CHECK(m3["slice"] == "seq=12:13");
  CHECK(m3["offset"]["seq"] == 12);
  CHECK(m3["placement"] == "Shard(seq)");
  CHECK(m3["axes"] == nlohmann::json{"batch", "seq", "hidden"});
  CHECK(m3["global_shape"]["seq"] == 13);
  CHECK(m3["ranks"].size() == 4);
}

TEST_CASE("golden: training goldens name gradients, updates and repeated boundaries", "[golden]") {
  const Scenario scenario = source_scenario("layernorm_train_sequence_sharded.toml");
  const GoldenSet set = build_goldens(scenario, captured_run(scenario, "f64"), {.write_f32 = false});
  for (const char* name : {"f64/s1/c1/loss", "f64/s2/c1/loss", "f64/s2/c1/ln.weight",
                           "f64/s1/c1/grad(y)@rank3[seq=12:13]"}) {
    INFO(name);
    CHECK(find_entry(set, name) != nullptr);
  }
  // grad(ln.weight) is recorded twice in step 1: the per-rank Partial shares from the backward
  // pass ("#1") and then the all-reduced Replicate value (the bare name, the last one).
  const GoldenEntry* partial = find_entry(set, "f64/s1/c1/grad(ln.weight)#1@rank1[partial]");
  const GoldenEntry* reduced = find_entry(set, "f64/s1/c1/grad(ln.weight)@rank1[replicate]");
  REQUIRE(partial != nullptr);
  REQUIRE(reduced != nullptr);
  CHECK(partial->slice == "partial");
  // The four shares sum to the reduced gradient (f64 sums of f64-rounded shares: a few ulps).
  std::vector<double> sum(raw_values(reduced->tensor).size(), 0.0);
  for (int r = 0; r < 4; ++r) {
    const GoldenEntry* share =
        find_entry(set, "f64/s1/c1/grad(ln.weight)#1@rank" + std::to_string(r) + "[partial]");
    REQUIRE(share != nullptr);
    const std::vector<double> v = raw_values(share->tensor);
    for (std::size_t i = 0; i < v.size(); ++i) sum[i] += v[i];
  }
  const std::vector<double> expected = raw_values(reduced->tensor);
  for (std::size_t i = 0; i < sum.size(); ++i) CHECK(sum[i] == Approx(expected[i]).epsilon(1e-12));
  const GoldenEntry& loss = *find_entry(set, "f64/s1/c1/loss");
  CHECK(loss.tensor.shape.empty());  // a scalar
  for (const GoldenEntry& e : set.entries) {
    CHECK(e.tensor.dtype == format::Dtype::f64);
    CHECK(e.tensor.name.find("@replicas") == std::string::npos);  // replica checks are not goldens
  }
}

TEST_CASE("golden: replaying a scenario gives byte-identical goldens", "[golden]") {
  const Scenario scenario = source_scenario("layernorm_train_sequence_sharded.toml");
  const GoldenSet first = build_goldens(scenario, captured_run(scenario, "mp128"), {});
  const GoldenSet second = build_goldens(scenario, captured_run(scenario, "mp128"), {});
  CHECK(first.safetensors == second.safetensors);
  CHECK(first.manifest == second.manifest);
  CHECK_FALSE(first.safetensors.empty());
}
