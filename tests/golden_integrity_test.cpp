// A golden directory says nothing its hashes do not cover, and `run --golden` leaves nothing half
// written: the safetensors header's __metadata__ must be the one the (digest-covered) manifest
// implies and the file must hold the manifest's tensors only; JSON with a NUL byte (which the
// parser would take for the end of its input) or a key given twice is refused; a directory or
// FIFO at a name the goldens are written to is refused before anything is computed.
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "cli_test_support.hpp"
#include "golden/golden_set.hpp"
#include "core/sha256.hpp"

using namespace cli_test;

namespace {

using Json = nlohmann::ordered_json;

fs::path make_goldens(const TempDir& dir, const std::string& extra = "") {
  const fs::path golden = dir.path() / "golden";
  const CliResult r =
      run_cli("run --quiet " + q(source_scenario("layernorm_sequence_sharded.toml")) +
              " --golden " + q(golden) + " --dtype f32" + extra);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return golden;
}

// The golden safetensors file rewritten with `edit` applied to its tensors and __metadata__
// (the data section unchanged).
void rewrite(const fs::path& file, const std::function<void(shardsim::SafetensorsFile&)>& edit) {
  shardsim::SafetensorsFile parsed = shardsim::read_safetensors(file.string());
  edit(parsed);
  const std::vector<std::pair<std::string, std::string>> metadata(parsed.metadata.begin(),
                                                                  parsed.metadata.end());
  std::ofstream(file, std::ios::binary | std::ios::trunc)
      << shardsim::encode_safetensors(parsed.tensors, metadata);
}

void expect_refused(const fs::path& golden, const std::string& where, const std::string& what) {
  const CliResult r =
      run_cli("compare " + q(golden) + " " + q(golden.parent_path() / "pristine.safetensors"));
  INFO("stderr: " << r.err);
  CHECK(r.exit_code == 2);
  CHECK(r.err.rfind("shardsim: error: " + where, 0) == 0);
  CHECK(r.err.find(what) != std::string::npos);
  CHECK(r.out.empty());
}

}  // namespace

TEST_CASE("golden: the safetensors header must say what the manifest says", "[golden]") {
  TempDir dir;
  const fs::path golden = make_goldens(dir);
  const fs::path file = golden / "goldens.safetensors";
  fs::copy_file(file, dir.path() / "pristine.safetensors");
  // Rewriting the file with the same content is accepted (its __metadata__ keys now sorted, not
  // in the writer's order): the check is on what the header says, not on its bytes.
  rewrite(file, [](shardsim::SafetensorsFile&) {});
  CHECK(run_cli("compare " + q(golden) + " " + q(dir.path() / "pristine.safetensors")).exit_code ==
        0);
  const std::string at = file.string() + ": ";
  SECTION("an edited value") {
    rewrite(file, [](shardsim::SafetensorsFile& f) { f.metadata["precision"] = "mp128"; });
    expect_refused(golden, at + "__metadata__.precision does not match the manifest",
                   "expected 'mp256'");
  }
  SECTION("a dropped key") {
    rewrite(file, [](shardsim::SafetensorsFile& f) { f.metadata.erase("scenario_sha256"); });
    expect_refused(golden, at + "__metadata__.scenario_sha256 does not match", "");
  }
  SECTION("an added key") {
    rewrite(file, [](shardsim::SafetensorsFile& f) { f.metadata["note"] = "x"; });
    expect_refused(golden, at + "__metadata__ holds keys the manifest does not give", "");
  }
  SECTION("a tensor the manifest does not list") {
    rewrite(file, [](shardsim::SafetensorsFile& f) {
      f.tensors.push_back(shardsim::raw_f32("extra", {1}, {1.0f}));
    });
    expect_refused(golden, at + "holds ", "tensors, the manifest lists ");
  }
}

TEST_CASE("golden: JSON with a NUL byte or a repeated key is refused", "[golden]") {
  TempDir dir;
  const fs::path golden = make_goldens(dir);
  fs::copy_file(golden / "goldens.safetensors", dir.path() / "pristine.safetensors");
  const fs::path manifest = golden / "manifest.json";
  const std::string text = slurp(manifest);
  SECTION("a manifest ending in NUL and junk, its digest recomputed over all of it") {
    // The digest covers the bytes with its own 64 digits zeroed (docs/goldens.md "The manifest").
    std::string edited = text + std::string(1, '\0') + "junk";
    const std::string digest = Json::parse(text)["manifest_sha256"];
    const std::size_t pos = edited.rfind(digest);
    edited.replace(pos, 64, std::string(64, '0'));
    edited.replace(pos, 64, shardsim::sha256_hex(edited));
    std::ofstream(manifest, std::ios::binary | std::ios::trunc) << edited;
    expect_refused(golden, manifest.string() + ": invalid JSON: a NUL byte at offset ",
                   std::to_string(text.size()));
  }
  SECTION("a manifest key given twice") {
    std::string edited = text;
    edited.replace(edited.find("\"ranks\":"), 0, "\"ranks\": 1,\n  ");
    std::ofstream(manifest, std::ios::binary | std::ios::trunc) << edited;
    expect_refused(golden, manifest.string() + ": invalid JSON: duplicate key 'ranks'", "");
  }
  SECTION("a candidate whose header continues after a NUL") {
    const std::string bytes = slurp(dir.path() / "pristine.safetensors");
    std::uint64_t length = 0;
    for (int i = 7; i >= 0; --i) length = (length << 8) | static_cast<unsigned char>(bytes[i]);
    // The header's last byte (a space or '}') becomes NUL: the JSON before it is incomplete or
    // complete, and either way the NUL is named.
    std::string edited = bytes;
    edited[8 + length - 1] = '\0';
    const fs::path candidate = dir.path() / "nul.safetensors";
    std::ofstream(candidate, std::ios::binary) << edited;
    const CliResult r = run_cli("compare " + q(golden) + " " + q(candidate));
    INFO(r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(candidate.string() + ": invalid JSON header: a NUL byte at offset " +
                     std::to_string(length - 1)) != std::string::npos);
  }
}

TEST_CASE("golden: a directory or FIFO at a golden file's name is refused before the run",
          "[golden][robustness]") {
  TempDir dir;
  const fs::path golden = dir.path() / "golden";
  const std::string scenario = q(source_scenario("layernorm_sequence_sharded.toml"));
  struct Case {
    std::string format, blocked;
    bool fifo;
  };
  for (const Case& c : {Case{"safetensors", "manifest.json", false},
                        Case{"safetensors", "goldens.safetensors", true},
                        Case{"npy", "f32__s1__c1__y.npy", false}}) {
    INFO(c.blocked);
    fs::remove_all(golden);
    fs::create_directories(golden);
    if (c.fifo) {
      REQUIRE(::mkfifo((golden / c.blocked).c_str(), 0644) == 0);
    } else {
      fs::create_directories(golden / c.blocked);
    }
    const fs::path report = dir.path() / "report.json";
    const CliResult r = run_cli("run --quiet " + scenario + " --golden " + q(golden) +
                                " --format " + c.format + " --dtype f32 --report " + q(report));
    INFO(r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err == "shardsim: error: --golden " + golden.string() + ": holds '" + c.blocked +
                       "', which is " + (c.fifo ? "not a regular file" : "a directory") +
                       "; shardsim writes a file at that name (move it away)\n");
    CHECK(r.out.empty());
    CHECK(entries(golden) == std::vector<std::string>{c.blocked});  // nothing written
    CHECK_FALSE(fs::exists(report));
  }
  // The same names as plain files are replaced (a rerun into the same directory).
  fs::remove_all(golden);
  make_goldens(dir);
  make_goldens(dir);
}
