// Golden tensors: the values of a high-precision run, each correctly rounded once to F64, F32,
// BF16 or F16 (a BF16 golden is rounded from the reference value, never from the F32 one), written
// as safetensors (or one .npy per tensor) plus a JSON manifest, for other backends to check
// against. The tensor-file codecs they use are in tensor_file.hpp.
//
// Naming (docs/goldens.md "Golden tensors" has the full table):
//   PREFIX/inputs/TENSOR               a scenario input, target or initial parameter
//   PREFIX/sSTEP/cCHUNK/TENSOR         a boundary's global (oracle) value in a step and chunk
//   PREFIX/sSTEP/cCHUNK/TENSOR#K       an earlier boundary of the same tensor in that step and
//                                      chunk (K = 1, 2, ... in recording order); the bare name is
//                                      the last one, e.g. a gradient's final accumulated value
//   NAME@rankR[SLICE]                  rank R's local tensor at that boundary; SLICE is
//                                      AXIS=BEGIN:END (global, half-open, "+Npad" when padded),
//                                      "replicate" or "partial"
//   PREFIX is f64, f32, bf16 or f16 (the dtype of the values), or u8 for dropout masks
//   (boundaries whose tensor name ends in ".mask" and whose values are all 0 or 1).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "compare/compare.hpp"
#include "golden/budget.hpp"
#include "io/tensor_file.hpp"

namespace shardsim {

// ---------------------------------------------------------------------------------------------
// Writing goldens.

enum class GoldenFormat { safetensors, npy };

struct GoldenOptions {
  GoldenFormat format = GoldenFormat::safetensors;
  bool write_f64 = true;
  bool write_f32 = true;
  bool write_bf16 = false;
  bool write_f16 = false;
};

// Parses --dtype: a comma-separated list of f64, f32, bf16, f16, "both" (f64 and f32) and "all"
// (the four). Throws InputError naming the flag and the accepted names otherwise.
void parse_golden_dtypes(std::string_view text, GoldenOptions& options);

// One tensor of a golden set with the facts the manifest records about it.
struct GoldenEntry {
  RawTensor tensor;
  std::string file;          // relative to the golden directory
  std::size_t boundary = 0;  // index into RunReport::boundaries
  int rank = -1;             // the rank for a shard, -1 for a global (oracle) value
  std::string slice;         // "seq=12:13", "seq=12:13+3pad", "replicate", "partial"; "" if global
  std::optional<TensorBudget> budget;  // BF16/F16 entries with budgets (budget.hpp)
  // dd/qd references only (CapturedValues::near_midpoint): how many of this tensor's values lie
  // within the reference's error budget of a rounding midpoint of its dtype, and the row-major
  // index of the first. The manifest records them as "near_midpoint".
  std::int64_t near_midpoint = 0;
  std::int64_t first_near_midpoint = -1;
};

struct GoldenSet {
  std::vector<GoldenEntry> entries;  // in data order: i64, f64, f32, bf16, f16, then u8
  // The i64 tensors (token ids, labels) are never boundaries of the run (scenario.hpp): each gets
  // an input boundary of its own here, numbered after the run's, which its entries (I64,
  // "i64/inputs/NAME" and each rank's shard) point at: GoldenEntry::boundary =
  // reference.boundaries.size() + k for id_boundaries[k].
  std::vector<TraceEntry> id_boundaries;
  // Written whenever a BF16 or F16 family is (budget.hpp); its per_entry are in the entries.
  std::optional<GoldenBudgets> budgets;
  std::string manifest;     // manifest.json text
  std::string safetensors;  // goldens.safetensors bytes (safetensors format only)
  // One line per tensor with near_midpoint > 0 (the first 8; then one line counting the rest),
  // for stderr: its golden might differ in the last bit from one rounded from an exact (or mp256)
  // reference.
  std::vector<std::string> warnings;
};

// The boundary of entry `boundary` (GoldenEntry::boundary): the run's, or one of id_boundaries.
inline const TraceEntry& golden_boundary(const GoldenSet& set, const RunReport& reference,
                                         std::size_t boundary) {
  return boundary < reference.boundaries.size()
             ? reference.boundaries[boundary].entry
             : set.id_boundaries.at(boundary - reference.boundaries.size());
}

// Builds the golden set of a run captured at the reference precision.
// REQUIRES: `reference` was evaluated with RunOptions::capture_tensors.
// Throws InputError when two tensors would share an npy file name.
GoldenSet build_goldens(const Scenario& scenario, const RunReport& reference,
                        const GoldenOptions& options);

// Checks that `dir` is a writable directory, or that it is missing and its parent is a writable
// directory. Throws InputError otherwise. Run it before any work, so that bad usage writes
// nothing (not even the directory).
void prepare_golden_dir(const std::string& dir);

// Writes the set into `dir`, creating it when missing: every data file atomically (temporary name,
// then rename), the manifest last, so a directory with a manifest is complete.
void write_goldens(const std::string& dir, const GoldenSet& set, const GoldenOptions& options);

// ---------------------------------------------------------------------------------------------
// Reading goldens back (shardsim compare).

// What the manifest says about one tensor.
struct GoldenInfo {
  std::string name;
  std::string file;
  format::Dtype dtype = format::Dtype::f64;
  std::vector<std::string> axes;    // this tensor's axis names, outermost first
  std::vector<std::int64_t> shape;  // this tensor's extents
  int rank = -1;                    // shard: its rank; global: -1
  std::string slice;
  std::map<std::string, std::int64_t> offset;  // shard: global offset per sharded axis
  Shape global_shape;                          // the boundary's global shape
  std::string placement;                       // "Shard(seq)", ...; N-D: "[Replicate, Shard(seq)]"
  Layout layout;                               // placement, parsed (one entry per mesh dim)
  std::shared_ptr<const Mesh> mesh;            // the manifest's mesh ("ranks" alone: 1-D)
  int ranks = 1;                               // mesh size
  std::string sha256;
  std::string boundary;                // "#5 step 1 chunk 1 layer_norm -> y"
  std::optional<TensorBudget> budget;  // a BF16/F16 tensor's error budget (budget.hpp)
};

struct GoldenDir {
  std::string path;
  std::string precision;
  std::string storage;            // "safetensors" or "npy"
  std::vector<GoldenInfo> infos;  // manifest order
  // The manifest's "budgets" (absent in manifests without BF16/F16 goldens, and in those
  // written before budgets were recorded): whether present, the programs they were taken over
  // ("accumulate f32; reduce orders rank, ring, tree; schedules rank, reverse") and, per
  // format without budgets ("bf16", "f16"), the reason.
  bool has_budgets = false;
  std::string budget_programs;
  std::map<std::string, std::string> budgets_unavailable;
  std::map<std::string, RawTensor> tensors;  // by name
  // The "__metadata__" a safetensors golden file must hold, from the manifest.
  std::map<std::string, std::string> safetensors_metadata;
};

// Loads DIR/manifest.json and the tensors it lists (from the safetensors file or the .npy files),
// checking each tensor's dtype, shape and SHA-256 against the manifest. Throws InputError on any
// mismatch or malformed file.
GoldenDir load_golden_dir(const std::string& dir);

// A candidate: a safetensors file (tensors by name), or a directory of .npy files (each tensor
// named by its file name without ".npy"; other files are ignored).
struct Candidate {
  bool is_npy_dir = false;
  std::vector<RawTensor> tensors;
};
Candidate load_candidate(const std::string& path);

}  // namespace shardsim
