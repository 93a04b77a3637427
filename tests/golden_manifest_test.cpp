// compare against an edited or unreachable golden directory, and against candidates larger than
// their headers say: exit 2 with a located message, never an abort or an unbounded read. The
// manifest's digest covers its metadata; its metadata is checked against each placement. A
// hostile file's names, keys and values are quoted at 80 bytes.
#include <functional>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "cli_test_support.hpp"
#include "core/error.hpp"
#include "golden/golden_set.hpp"
#include "core/sha256.hpp"

using namespace cli_test;

namespace {

using Json = nlohmann::ordered_json;

// f32 goldens of a bundled scenario (default: the sequence-sharded LayerNorm).
fs::path make_goldens(const TempDir& dir,
                      const std::string& scenario = "layernorm_sequence_sharded.toml") {
  const fs::path golden = dir.path() / "golden";
  const CliResult r = run_cli("run --quiet " + q(source_scenario(scenario)) + " --golden " +
                              q(golden) + " --dtype f32");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return golden;
}

// The manifest text of `manifest` with its digest recomputed the way shardsim writes it.
std::string rehashed(Json manifest) {
  const std::string zeros(64, '0');
  manifest["manifest_sha256"] = zeros;
  std::string text = manifest.dump(2) + "\n";
  const std::size_t at = text.rfind("\"" + zeros + "\"");
  text.replace(at + 1, 64, shardsim::sha256_hex(text));
  return text;
}

void expect_compare_refused(const fs::path& golden, const std::string& candidate,
                            const std::string& where, const std::string& what) {
  const CliResult r = run_cli("compare " + q(golden) + " " + candidate);
  INFO("stderr: " << r.err);
  CHECK(r.exit_code == 2);
  CHECK(r.err.rfind("shardsim: error: " + where, 0) == 0);
  CHECK(r.err.find(what) != std::string::npos);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK(r.out.empty());
}

// A safetensors file from a raw header text and data bytes.
std::string safetensors_bytes(const std::string& header, const std::string& data) {
  std::string out;
  for (int i = 0; i < 8; ++i) out += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + data;
}

// An npy v1.0 file from a raw header dict and data bytes.
std::string npy_with_header(std::string header, const std::string& data) {
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  return out + header + data;
}

}  // namespace

TEST_CASE("compare: an edited manifest is refused, hashed or not, and never aborts", "[compare]") {
  TempDir dir;
  const fs::path golden = make_goldens(dir);
  const fs::path manifest_path = golden / "manifest.json";
  const std::string original = slurp(manifest_path);
  const Json manifest = Json::parse(original);
  const std::string candidate = q(golden / "goldens.safetensors");
  // Index of f32/s1/c1/y (global, Shard(seq)) and of rank 3's shard.
  std::size_t y = 0, y3 = 0;
  for (std::size_t i = 0; i < manifest["tensors"].size(); ++i) {
    if (manifest["tensors"][i]["name"] == "f32/s1/c1/y") y = i;
    if (manifest["tensors"][i]["name"] == "f32/s1/c1/y@rank3[seq=12:13]") y3 = i;
  }
  REQUIRE(y3 > y);
  // The digest checks out as written.
  CHECK(rehashed(manifest) == original);
  struct Edit {
    std::function<void(Json&)> apply;
    std::string key, what;
  };
  const std::vector<Edit> edits = {
      {[&](Json& m) { m["tensors"][y]["global_shape"]["seq"] = 12; },
       "tensors[" + std::to_string(y) + "].shape", "does not match [batch=2, seq=12, hidden=16]"},
      {[&](Json& m) {
         m["tensors"][y]["global_shape"] = Json{{"batch", 2}, {"hidden", 16}, {"seq", 13}};
       },
       "tensors[" + std::to_string(y) + "].global_shape", "are not the tensor's axes, in order"},
      {[&](Json& m) { m["tensors"][y3]["offset"]["seq"] = 11; },
       "tensors[" + std::to_string(y3) + "].offset", "expected {\"seq\":12}"},
      // Once the input of an abort ("global position owned by no rank"): a shard that owns
      // nothing where the manifest says it does.
      {[&](Json& m) { m["tensors"][y3]["placement"] = "Shard(seq, balanced)"; },
       "tensors[" + std::to_string(y3) + "].shape", "does not match [batch=2, seq=3, hidden=16]"},
      {[&](Json& m) { m["tensors"][y]["placement"] = "Shard(batch)"; },
       "tensors[" + std::to_string(y) + "].ranks",
       "does not match the extents Shard(batch) gives each of the 4 ranks"},
      {[&](Json& m) { m["tensors"][y]["placement"] = "Shard(vocab)"; },
       "tensors[" + std::to_string(y) + "].placement", "shards an axis global_shape does not have"},
      {[&](Json& m) { m["tensors"][y3]["slice"] = "seq=0:13"; },
       "tensors[" + std::to_string(y3) + "].slice", "expected 'seq=12:13'"},
      {[&](Json& m) { m["tensors"][y3]["role"] = "global"; },
       "tensors[" + std::to_string(y3) + "].role", "a tensor with a rank must be a \"shard\""},
      // An extent whose shard arithmetic would overflow (torch.chunk of 2^63 - 1 over 4 ranks).
      {[&](Json& m) { m["tensors"][y]["global_shape"]["seq"] = INT64_MAX; },
       "tensors[" + std::to_string(y) + "].global_shape", "more than 2^62 elements"},
      // An N-D mesh block: names must be unique (the Mesh invariant), sizes multiply to ranks.
      {[&](Json& m) {
         m["mesh"] = Json::array({Json{{"name", "dp"}, {"size", 2}}, Json{{"name", "dp"}, {"size", 2}}});
       },
       "mesh[1].name", "duplicate dim name 'dp'"},
      {[&](Json& m) {
         m["mesh"] = Json::array({Json{{"name", "dp"}, {"size", 2}}, Json{{"name", "tp"}, {"size", 3}}});
       },
       "mesh", "its dims multiply to 6, not to ranks"},
      // The keys compare only prints or passes over: typed, and names shardsim knows.
      {[&](Json& m) { m["precision"] = "mp0"; }, "precision", "invalid precision 'mp0'"},
      {[&](Json& m) { m["tensors"][y]["boundary"]["step"] = 0; },
       "tensors[" + std::to_string(y) + "].boundary.step", "steps count from 1"},
      {[&](Json& m) { m["tensors"][y]["boundary"]["kind"] = "opp"; },
       "tensors[" + std::to_string(y) + "].boundary.kind", "unknown boundary kind 'opp'"},
      {[&](Json& m) { m["tensors"][y]["boundary"]["exact_claimed"] = "x"; },
       "tensors[" + std::to_string(y) + "].boundary.exact_claimed", "expected true or false"},
      {[&](Json& m) { m["tensors"][y]["slice"] = 12345; },
       "tensors[" + std::to_string(y) + "].slice", "a global tensor has no slice"},
      {[&](Json& m) { m["tensors"][y]["file"] = "manifest.json"; },
       "tensors[" + std::to_string(y) + "].file", "is not a file of safetensors storage"},
      {[&](Json& m) {
         m["tensors"][y]["near_midpoint"] = Json{{"count", 1}, {"first_index", 416}};
       },
       "tensors[" + std::to_string(y) + "].near_midpoint.first_index", "out of range"},
      // Keys that must agree with the rest of the manifest. An mp256 run carries 257 bits
      // (mp.hpp); these goldens are F32 only (--dtype f32).
      {[&](Json& m) { m["significand_bits"] = -1; }, "significand_bits", "out of range"},
      {[&](Json& m) { m["significand_bits"] = 53; }, "significand_bits",
       "53 is not what a mp256 run carries"},
      {[&](Json& m) { m["dtypes"] = Json::array({"f64"}); }, "tensors[0].dtype",
       "'F32' is not among dtypes"},
      {[&](Json& m) {
         m["dtypes"] = Json::array({"f32", "f32"});
       },
       "dtypes", "'f32' is listed twice"},
      {[&](Json& m) {
         m["dtypes"] = Json::array({"f32", "f64"});
       },
       "dtypes", "'f64' is listed but no tensor has it"},
      {[&](Json& m) { m["faults"] = Json::array({"nope"}); }, "faults", "unknown fault 'nope'"},
      {[&](Json& m) { m["scenario"]["text"] = "name = \"other\"\n"; }, "scenario.sha256",
       "does not match the SHA-256 of scenario.text"},
      // A key the writer never writes, at each level.
      {[&](Json& m) { m["foo"] = 1; }, "(root)", "unknown key 'foo'"},
      {[&](Json& m) { m["scenario"]["foo"] = 1; }, "scenario", "unknown key 'foo'"},
      {[&](Json& m) { m["tensors"][y]["foo"] = 1; }, "tensors[" + std::to_string(y) + "]",
       "unknown key 'foo'"},
      {[&](Json& m) { m["boundaries"][0]["foo"] = 1; }, "boundaries[0]", "unknown key 'foo'"},
      {[&](Json& m) { m["reduce_order"] = "nope"; }, "reduce_order", "nope"},
      {[&](Json& m) { m["schedule"] = Json::array(); }, "(root).schedule", "expected a string"},
      {[&](Json& m) { m["verdict"] = "maybe"; }, "verdict", "expected \"pass\" or \"fail\""},
      {[&](Json& m) { m["dtypes"] = Json::array({"f33"}); }, "dtypes", "unknown dtype 'f33'"},
      {[&](Json& m) { m["faults"] = true; }, "faults", "expected an array of names"},
      {[&](Json& m) { m["boundaries"] = 1; }, "boundaries", "expected an array"},
  };
  for (const Edit& edit : edits) {
    INFO(edit.key);
    Json edited = manifest;
    edit.apply(edited);
    // Without a new digest the edit is caught by the digest...
    std::string stale = rehashed(edited);
    stale.replace(stale.rfind("\"manifest_sha256\": \"") + 20, 64,
                  manifest["manifest_sha256"].get<std::string>());
    std::ofstream(manifest_path, std::ios::trunc) << stale;
    expect_compare_refused(golden, candidate, manifest_path.string() + ": manifest_sha256: ",
                           "does not match the manifest's bytes");
    // ...and with one, by the metadata check.
    std::ofstream(manifest_path, std::ios::trunc) << rehashed(edited);
    expect_compare_refused(golden, candidate, manifest_path.string() + ": " + edit.key + ": ",
                           edit.what);
  }
  std::ofstream(manifest_path, std::ios::trunc) << original;
  CHECK(run_cli("compare " + q(golden) + " " + candidate).exit_code == 0);
}

TEST_CASE("compare: a nested zigzag placement is refused, never an abort", "[compare]") {
  // A zigzag share cannot nest with another dim's share of its axis (Layout::problem, as the
  // scenario loader refuses it). In a manifest it reached the slice arithmetic and aborted
  // ("a zigzag share does not nest", signal 6).
  TempDir dir;
  const fs::path golden = make_goldens(dir, "mesh_cp_tp_zigzag_training.toml");
  const fs::path manifest_path = golden / "manifest.json";
  Json manifest = Json::parse(slurp(manifest_path));
  std::size_t at = manifest["tensors"].size();
  for (std::size_t i = 0; i < manifest["tensors"].size() && at == manifest["tensors"].size(); ++i) {
    if (manifest["tensors"][i]["placement"] == "[Shard(seq, zigzag), Replicate]") at = i;
  }
  REQUIRE(at < manifest["tensors"].size());
  manifest["tensors"][at]["placement"] = "[Shard(seq, zigzag), Shard(seq)]";
  std::ofstream(manifest_path, std::ios::trunc) << rehashed(manifest);
  expect_compare_refused(
      golden, q(golden / "goldens.safetensors"),
      manifest_path.string() + ": tensors[" + std::to_string(at) + "].placement: ",
      "a zigzag share cannot nest with another");
}

TEST_CASE("compare: paths the filesystem refuses are exit 2, never an abort", "[compare]") {
  TempDir dir;
  const fs::path golden = make_goldens(dir);
  const std::string candidate = q(golden / "goldens.safetensors");
  const std::string too_long = (dir.path() / std::string(300, 'a')).string();  // NAME_MAX is 255
  expect_compare_refused(too_long, candidate, too_long.substr(0, 40), "File name too long");
  fs::create_symlink(dir.path() / "loop", dir.path() / "loop");
  expect_compare_refused(dir.path() / "loop", candidate, (dir.path() / "loop").string(),
                         "Too many levels of symbolic links");
  expect_compare_refused(golden, q(dir.path() / "loop"), (dir.path() / "loop").string(),
                         "Too many levels of symbolic links");
  expect_compare_refused(golden, "/dev/zero", "/dev/zero: is a device, not a regular file", "");
  if (as_nobody().empty()) {
    WARN(
        "skipped: running as root without setpriv, so a parent directory cannot be made "
        "unreadable");
    return;
  }
  const fs::path locked = dir.path() / "locked";
  fs::create_directories(locked / "inner");
  fs::permissions(locked, fs::perms::owner_all);  // 0700, owner root: nobody cannot enter
  const CliResult r = run_cli("compare " + q(locked / "inner") + " " + candidate, as_nobody());
  INFO(r.err);
  CHECK(r.exit_code == 2);
  CHECK(r.err.rfind("shardsim: error: " + (locked / "inner").string() +
                        ": cannot examine: Permission denied",
                    0) == 0);
}

TEST_CASE("compare: a candidate larger than its header declares is refused before it is read",
          "[compare]") {
  TempDir dir;
  const fs::path golden = make_goldens(dir);
  // The goldens themselves, followed by 4 GiB of (sparse) zeros: reading it all would take 4 GiB.
  const fs::path big = dir.path() / "big.safetensors";
  fs::copy_file(golden / "goldens.safetensors", big);
  fs::resize_file(big, fs::file_size(big) + (std::uintmax_t{4} << 30));
  expect_compare_refused(golden, q(big),
                         big.string() + ": hole in the data section: 4294967296 trailing bytes",
                         "belong to no tensor");
  // The same for an npy candidate in a directory.
  fs::create_directories(dir.path() / "npy");
  const fs::path npy = dir.path() / "npy" / "f32__s1__c1__y.npy";
  std::ofstream(npy, std::ios::binary)
      << shardsim::encode_npy(shardsim::raw_f32("", {2, 13, 16}, std::vector<float>(416, 0.0f)));
  fs::resize_file(npy, fs::file_size(npy) + (std::uintmax_t{4} << 30));
  expect_compare_refused(golden, q(dir.path() / "npy"), npy.string() + ": shape/size mismatch",
                         "(trailing bytes)");
}

TEST_CASE("golden: names, keys and values from a hostile file are quoted at 80 bytes", "[golden]") {
  // A 1 MB name, key or dtype (9 kB in npy, whose header may hold 10000 bytes) is quoted as its
  // first 80 bytes and an ellipsis, so the message stays one short line.
  const std::string big(1 << 20, 'n'), key(9000, 'n'), cut = std::string(80, 'n') + "\u2026";
  const std::string entry = R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})", data(8, '\0');
  const std::string npy_tail = "', 'fortran_order': False, 'shape': (2,), }";
  using Decode = std::function<void()>;
  auto st = [&](const std::string& header) -> Decode {
    return [=] { shardsim::decode_safetensors(safetensors_bytes(header, data), "t.safetensors"); };
  };
  auto npy = [&](const std::string& dict) -> Decode {
    return [=] { shardsim::decode_npy(npy_with_header(dict, data), "t.npy"); };
  };
  const std::vector<std::pair<Decode, std::string>> cases = {
      {st("{\"" + big + R"(":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})"),
       "tensor '" + cut + "': unknown key 'x'"},
      {st(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],")" + big + "\":1}}"),
       "unknown key '" + cut + "'"},
      {st("{\"" + big + "\":" + entry + ",\"" + big + "\":" + entry + "}"),
       "duplicate key '" + cut},
      {st(R"({"a":{"dtype":")" + big + R"(","shape":[2],"data_offsets":[0,8]}})"),
       "unknown dtype \"" + cut.substr(1)},
      {st(R"({"a":{"dtype":"F32","shape":[")" + big + R"("],"data_offsets":[0,8]}})"),
       "expected a non-negative integer, got \"" + cut.substr(1)},
      {st("{\"" + big + R"(":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})"),
       "and tensor '" + cut + "' belong to no tensor"},
      {npy("{'" + key + "': 1}"), "unknown key '" + cut + "'"},
      {npy("{'descr': '" + key + npy_tail), "unknown or unsupported dtype '" + cut + "'"},
  };
  for (const auto& [decode, what] : cases) {
    INFO(what);
    try {
      decode();
      FAIL("accepted a malformed file");
    } catch (const shardsim::InputError& e) {
      INFO(std::string(e.what()).substr(0, 300));
      CHECK(std::string(e.what()).size() < 300);
      CHECK(std::string(e.what()).find(what) != std::string::npos);
    }
  }
}
