// The manifest's consistency with itself (manifest.hpp): the keys compare only prints must agree
// with the rest of the manifest, and no object has a key the writer (manifest.cpp) never
// writes. Runs after the reader's typed checks (manifest_reader.cpp), so every value read here
// has its type.
#include <algorithm>
#include <cctype>
#include <initializer_list>
#include <set>
#include <string>
#include <string_view>

#include "core/error.hpp"
#include "core/fault_list.hpp"
#include "core/scalar.hpp"
#include "core/sha256.hpp"
#include "golden/manifest.hpp"

namespace shardsim::golden_detail {

namespace {

[[noreturn]] void fail(const std::string& what, const std::string& path, const std::string& why) {
  throw InputError(what + ": " + path + ": " + why);
}

// An object's keys must be among `known`: a key the writer never writes is an edit, refused as
// one rather than ignored.
void check_known_keys(const std::string& what, const Json& object, const std::string& path,
                      std::initializer_list<std::string_view> known) {
  if (!object.is_object()) fail(what, path, "expected an object");
  for (const auto& item : object.items()) {
    if (std::find(known.begin(), known.end(), item.key()) == known.end()) {
      fail(what, path, "unknown key " + quote(item.key()));
    }
  }
}

// Whether a run at `precision` carries `bits` significand bits: the format's own (24 at f32, 53
// at f64, 8 at bf16, 11 at f16, 106 at dd, 212 at qd: Precision::bits); for mp<N> the smallest
// Boost decimal precision with at least N bits (mp.hpp), so N up to N + 3 (a decimal digit is
// log2(10) < 3.33 bits).
bool consistent_bits(const Precision& precision, std::int64_t bits) {
  const auto requested = static_cast<std::int64_t>(precision.bits);
  if (precision.kind != ScalarKind::mp) return bits == requested;
  return bits >= requested && bits <= requested + 3;
}

// A name list ("faults", "dtypes"): each name once; faults known to this shardsim.
void check_names(const std::string& what, const Json& list, const char* key) {
  std::set<std::string> seen;
  for (const Json& name : list) {
    const std::string text = name.get<std::string>();
    if (std::string_view(key) == "faults" && !find_fault(text)) {
      fail(what, key, "unknown fault " + quote(text));
    }
    if (!seen.insert(text).second) fail(what, key, quote(text) + " is listed twice");
  }
}

}  // namespace

void check_manifest_consistency(const Json& manifest, const std::string& what) {
  check_known_keys(
      what, manifest, "(root)",
      {"format", "format_version", "shardsim_version", "scenario", "precision", "significand_bits",
       "reduce_order", "schedule", "ranks", "mesh", "faults", "verdict", "storage", "dtypes",
       "budgets", "boundaries", "tensors", kManifestDigestKey});
  const std::string precision = manifest["precision"].get<std::string>();
  const auto bits = manifest["significand_bits"].get<std::int64_t>();
  if (!consistent_bits(parse_precision(precision), bits)) {
    fail(what, "significand_bits",
         std::to_string(bits) + " is not what a " + precision + " run carries");
  }
  const Json& scenario = manifest["scenario"];
  check_known_keys(what, scenario, "scenario", {"name", "sha256", "text", "input_files"});
  if (!scenario.contains("text") || !scenario["text"].is_string()) {
    fail(what, "scenario.text", "expected a string");
  }
  if (sha256_hex(scenario["text"].get<std::string>()) != scenario["sha256"].get<std::string>()) {
    fail(what, "scenario.sha256", "does not match the SHA-256 of scenario.text");
  }
  check_names(what, manifest["faults"], "faults");
  check_names(what, manifest["dtypes"], "dtypes");
  // "dtypes" names exactly the floating dtypes of the tensors (a U8 mask is written whatever
  // they are).
  std::set<std::string> listed;
  for (const Json& name : manifest["dtypes"]) listed.insert(name.get<std::string>());
  std::set<std::string> held;
  const Json& tensors = manifest["tensors"];
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const std::string path = "tensors[" + std::to_string(i) + "]";
    check_known_keys(
        what, tensors[i], path,
        {"name", "file", "dtype", "shape", "axes", "role", "rank", "slice", "offset", "runs",
         "boundary", "global_shape", "placement", "ranks", "budget", "sha256", "near_midpoint"});
    const std::string dtype = tensors[i]["dtype"].get<std::string>();
    std::string lower;
    for (const char c : dtype)
      lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower == "f64" || lower == "f32" || lower == "bf16" || lower == "f16") {
      if (!listed.count(lower)) fail(what, path + ".dtype", quote(dtype) + " is not among dtypes");
      held.insert(lower);
    }
  }
  for (const std::string& dtype : listed) {
    if (!tensors.empty() && !held.count(dtype)) {
      fail(what, "dtypes", quote(dtype) + " is listed but no tensor has it");
    }
  }
  const Json& boundaries = manifest["boundaries"];
  for (std::size_t i = 0; i < boundaries.size(); ++i) {
    check_known_keys(what, boundaries[i], "boundaries[" + std::to_string(i) + "]",
                     {"id", "step", "chunk", "micro", "kind", "op", "tensor", "scenario_step",
                      "scenario_op", "params"});
  }
}

}  // namespace shardsim::golden_detail
