// Private to the golden writer and reader: the manifest's JSON pieces that both sides build the
// same way (so the reader can check the metadata by rebuilding it), and the manifest digest.
//
// manifest_sha256, the last key of the manifest, is the SHA-256 of the file's bytes with that
// key's value (64 hex digits) written as 64 '0' characters. With each tensor's own sha256 over
// its data, every byte of a golden directory is covered by a hash.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "golden/golden_set.hpp"
#include "core/trace.hpp"

namespace shardsim::golden_detail {

using Json = nlohmann::ordered_json;

inline constexpr std::string_view kManifestDigestKey = "manifest_sha256";

// Refuses (InputError "WHAT: KEY: ...") a manifest that contradicts itself where the reader's
// typed checks do not look: significand_bits against the precision, scenario.sha256 against
// scenario.text, "faults" and "dtypes" (each name once; known faults; exactly the tensors'
// floating dtypes), and a key the writer never writes in the root, "scenario", a tensor or a
// boundary (manifest_consistency.cpp). REQUIRES: the reader's typed checks passed.
void check_manifest_consistency(const Json& manifest, const std::string& what);

Json shape_json(const Shape& shape);
Json rank_json(const RankExtent& r);
// Every rank's extent of a boundary, as the manifest lists them under "ranks".
Json ranks_json(const Shape& global, const Layout& layout, const Mesh& mesh);
// A shard's slice label: "seq=12:13", "seq=12:13+3pad", "replicate", "partial"; on an N-D mesh
// every sharded axis ("batch=0:1,seq=7:13"), then ",partial" where a dim holds addends; a zigzag
// share lists its two runs ("seq=0:4+12:13").
std::string slice_label(const Shape& global, const Layout& layout, const Mesh& mesh, int rank);
// A shard's "offset" object: {axis: begin} for every sharded axis, {} otherwise.
Json offset_json(const Shape& global, const Layout& layout, const Mesh& mesh, int rank);
// A shard's "runs" object: {axis: [[begin, end], [begin, end]]} for every axis whose share is two
// runs (zigzag), {} otherwise (the manifest writes the key only when it is not empty).
Json runs_json(const Shape& global, const Layout& layout, const Mesh& mesh, int rank);
// A shard's name: NAME@rankR[SLICE]; on an N-D mesh NAME@rankR(dp=1,tp=0)[SLICE].
std::string shard_name(const std::string& name, const Mesh& mesh, int rank,
                       const std::string& slice);
// The manifest's "mesh": [{"name": "dp", "size": 2}, ...] (written for N-D meshes only).
Json mesh_json(const Mesh& mesh);

// The golden safetensors file's "__metadata__": the writer's version, the scenario's name and
// SHA-256, the reference precision and reduce order, and the manifest's file name. The writer
// writes it and the reader requires it, so the file's header says nothing the manifest (covered
// by its digest) does not. In the order the writer writes it (the golden bytes depend on it).
std::vector<std::pair<std::string, std::string>> safetensors_metadata(
    const std::string& version, const std::string& scenario, const std::string& scenario_sha256,
    const std::string& precision, const std::string& reduce_order);

// The SHA-256 (hex) of `text` with the last occurrence of the quoted string `value` replaced by
// as many '0' characters. REQUIRES: the quoted value occurs in `text`.
std::string manifest_digest(std::string_view text, std::string_view value);

// The manifest of a golden set (docs/goldens.md "The manifest"), its digest filled in.
// REQUIRES: set.entries and set.budgets are filled in (set.manifest is what this returns).
std::string manifest_text(const Scenario& scenario, const RunReport& reference,
                          const GoldenSet& set, const GoldenOptions& options);

// The manifest's "budgets" object (docs/goldens.md "Error budgets"), and each narrow tensor's
// "budget".
Json budgets_json(const GoldenBudgets& budgets);
Json tensor_budget_json(const TensorBudget& budget);
// Reads them back into `out` (GoldenDir::has_budgets, budget_programs, budgets_unavailable and
// each GoldenInfo::budget), checking that every BF16/F16 tensor of a format with budgets has
// one and no other tensor does. Throws InputError located as "WHAT: key.path: ...".
void parse_budgets(const Json& manifest, const std::string& what, GoldenDir& out);

// The manifest's header, digest and tensors (not the tensors' data), every tensor's metadata
// checked against its placement. Throws InputError located as "WHAT: key.path: ...".
GoldenDir parse_manifest(const std::string& text, const std::string& what);

}  // namespace shardsim::golden_detail
