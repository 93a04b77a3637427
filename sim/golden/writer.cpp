// Building and writing a golden set: names (golden_set.hpp), the manifest (manifest.cpp), the
// safetensors or npy files.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <vector>

#include "core/error.hpp"
#include "core/io.hpp"
#include "core/scalar.hpp"
#include "core/sha256.hpp"
#include "golden/golden_set.hpp"
#include "golden/manifest.hpp"
#include "report/report.hpp"

namespace shardsim {

namespace {

std::vector<std::int64_t> extents(const Shape& shape) {
  std::vector<std::int64_t> out;
  for (const Axis& axis : shape.axes()) out.push_back(axis.extent);
  return out;
}

// A dropout mask: the name says so and every value is 0 or 1.
bool is_mask(const TraceEntry& entry, const CapturedBoundary& captured) {
  if (!entry.tensor.ends_with(".mask")) return false;
  auto binary = [](const std::vector<double>& values) {
    return std::all_of(values.begin(), values.end(), [](double v) { return v == 0.0 || v == 1.0; });
  };
  if (captured.has_dense && !binary(captured.dense.f64)) return false;
  for (const CapturedValues& rank : captured.ranks) {
    if (!binary(rank.f64)) return false;
  }
  return true;
}

// The base name of every golden boundary. "inputs/T" is a scenario tensor's global value: its
// first input boundary, recorded before any chunk is loaded. Every other boundary is "sS/cC/T"
// ("sS/mM/cC/T" in a micro-batched run), the chunk slices of a streamed input and the
// micro-batches' rows of an input included. "#K" goes on all but the last of several
// boundaries that share a name.
std::vector<std::string> base_names(const RunReport& report, const std::vector<std::size_t>& kept) {
  std::vector<std::string> names;
  std::set<std::string> loaded;
  std::map<std::string, int> total;
  for (std::size_t i : kept) {
    const TraceEntry& e = report.boundaries[i].entry;
    const bool global_input =
        e.kind == BoundaryKind::input && e.op == "input" && loaded.insert(e.tensor).second;
    // A micro-batched run puts the micro-batch between step and chunk: "sS/mM/cC/T".
    const std::string micro = e.micro_count > 0 ? "/m" + std::to_string(e.micro) : "";
    names.push_back(global_input ? "inputs/" + e.tensor
                                 : "s" + std::to_string(e.step) + micro + "/c" +
                                       std::to_string(e.chunk) + "/" + e.tensor);
    ++total[names.back()];
  }
  std::map<std::string, int> seen;
  for (std::string& name : names) {
    const int k = ++seen[name];
    if (k < total[name]) name += "#" + std::to_string(k);
  }
  return names;
}

struct Family {
  const char* prefix;
  format::Dtype dtype;
  std::uint8_t near_flag;  // its kNear* bit in CapturedValues::near_midpoint (0 for u8 masks)
};

// Counts the values flagged near a midpoint of the family's dtype (dd/qd references).
void mark_near_midpoints(GoldenEntry& entry, const CapturedValues& values, std::uint8_t flag) {
  for (std::size_t i = 0; i < values.near_midpoint.size(); ++i) {
    if (!(values.near_midpoint[i] & flag)) continue;
    if (entry.near_midpoint++ == 0) entry.first_near_midpoint = static_cast<std::int64_t>(i);
  }
}

// The entries of one dtype family: per kept boundary its global value and each rank's tensor.
void add_family(const Family& family, const RunReport& reference,
                const std::vector<std::size_t>& kept, const std::vector<std::string>& bases,
                std::vector<GoldenEntry>& out) {
  for (std::size_t k = 0; k < kept.size(); ++k) {
    const BoundaryResult& b = reference.boundaries[kept[k]];
    const CapturedBoundary& captured = *b.captured;
    if (is_mask(b.entry, captured) != (family.dtype == format::Dtype::u8)) continue;
    auto raw = [&](std::string name, const Shape& shape, const CapturedValues& values) {
      switch (family.dtype) {
        case format::Dtype::f64:
          return raw_f64(std::move(name), extents(shape), values.f64);
        case format::Dtype::f32:
          return raw_f32(std::move(name), extents(shape), values.f32);
        case format::Dtype::bf16:
          return raw_bits16(std::move(name), family.dtype, extents(shape), values.bf16);
        case format::Dtype::f16:
          return raw_bits16(std::move(name), family.dtype, extents(shape), values.f16);
        default:
          return raw_u8(std::move(name), extents(shape), values.f64);
      }
    };
    const std::string name = family.prefix + bases[k];
    if (captured.has_dense) {
      out.push_back({raw(name, b.entry.global, captured.dense), "", kept[k], -1, ""});
      mark_near_midpoints(out.back(), captured.dense, family.near_flag);
    }
    const int ranks = static_cast<int>(captured.ranks.size());
    for (int r = 0; r < ranks; ++r) {
      const std::string slice =
          golden_detail::slice_label(b.entry.global, b.entry.layout, *b.entry.mesh, r);
      out.push_back({raw(golden_detail::shard_name(name, *b.entry.mesh, r, slice),
                         b.entry.ranks[static_cast<std::size_t>(r)].local_shape,
                         captured.ranks[static_cast<std::size_t>(r)]),
                     "", kept[k], r, slice});
      mark_near_midpoints(out.back(), captured.ranks[static_cast<std::size_t>(r)],
                          family.near_flag);
    }
  }
}

// The i64 tensors (token ids, labels), which the run holds outside its boundaries: each gets an
// input boundary numbered after the run's (GoldenSet::id_boundaries) and its entries, I64, the
// global value "i64/inputs/NAME" and each rank's shard as its placement gives it.
void add_id_tensors(const Scenario& scenario, const RunReport& reference, GoldenSet& set) {
  if (reference.boundaries.empty()) return;
  const std::shared_ptr<const Mesh>& mesh = reference.boundaries.front().entry.mesh;
  // Every rank's shard, also where this process holds only some of the ranks (a transport).
  const auto whole = std::make_shared<const Mesh>(mesh->dims());
  for (const TensorSpec& spec : scenario.id_tensors) {
    TraceEntry e;
    e.id = static_cast<int>(reference.boundaries.size() + set.id_boundaries.size());
    e.kind = BoundaryKind::input;
    e.op = "input";
    e.tensor = e.dense = spec.name;
    e.exact = true;
    e.global = spec.shape;
    e.layout = spec.layout;
    e.mesh = mesh;
    e.ranks = rank_extents(spec.shape, spec.layout, *mesh);
    const std::size_t boundary = reference.boundaries.size() + set.id_boundaries.size();
    set.id_boundaries.push_back(e);
    const std::vector<double> values(spec.ids->begin(), spec.ids->end());
    const std::string name = "i64/inputs/" + spec.name;
    set.entries.push_back({raw_i64(name, extents(spec.shape), values), "", boundary, -1, ""});
    const DistTensor<double> shards =
        distribute(spec.name, Tensor<double>(spec.shape, values), spec.layout, whole);
    for (int r = 0; r < shards.ranks(); ++r) {
      const std::string slice = golden_detail::slice_label(spec.shape, spec.layout, *mesh, r);
      set.entries.push_back({raw_i64(golden_detail::shard_name(name, *mesh, r, slice),
                                     extents(shards.local(r).shape()), shards.local(r).values()),
                             "", boundary, r, slice});
    }
  }
}

// Each entry's file: the safetensors file, or its own npy file (names must not collide).
void assign_files(std::vector<GoldenEntry>& entries, GoldenFormat format) {
  std::set<std::string> files;
  for (GoldenEntry& entry : entries) {
    if (format == GoldenFormat::safetensors) {
      entry.file = std::string(format::kGoldenSafetensorsFile);
      continue;
    }
    entry.file = npy_file_name(entry.tensor.name);
    if (!files.insert(entry.file).second) {
      throw InputError("golden tensor " + quote(entry.tensor.name) + " would share the npy file " +
                       quote(entry.file) + " with another tensor; rename a tensor in the scenario");
    }
  }
}

}  // namespace

GoldenSet build_goldens(const Scenario& scenario, const RunReport& reference,
                        const GoldenOptions& options) {
  // Boundaries that carry golden values: every captured one except replica checks (their
  // "oracle" is rank 0's own copy, not an oracle value).
  std::vector<std::size_t> kept;
  for (std::size_t i = 0; i < reference.boundaries.size(); ++i) {
    const BoundaryResult& b = reference.boundaries[i];
    SHARDSIM_ASSERT(b.captured != nullptr, "build_goldens needs a run with capture_tensors");
    if (b.entry.kind != BoundaryKind::check) kept.push_back(i);
  }
  const std::vector<std::string> bases = base_names(reference, kept);
  std::vector<Family> families;
  if (options.write_f64) families.push_back({"f64/", format::Dtype::f64, kNearF64});
  if (options.write_f32) families.push_back({"f32/", format::Dtype::f32, kNearF32});
  if (options.write_bf16) families.push_back({"bf16/", format::Dtype::bf16, kNearBf16});
  if (options.write_f16) families.push_back({"f16/", format::Dtype::f16, kNearF16});
  families.push_back({"u8/", format::Dtype::u8, 0});
  GoldenSet set;
  add_id_tensors(scenario, reference, set);  // first: 8-byte I64 before F64 keeps all aligned
  for (const Family& family : families) add_family(family, reference, kept, bases, set.entries);
  // One line per flagged tensor up to kListed, then one line for the rest (the manifest has all).
  constexpr std::size_t kListed = 8;
  std::int64_t more_tensors = 0, more_values = 0;
  for (const GoldenEntry& entry : set.entries) {
    if (entry.near_midpoint == 0) continue;
    if (set.warnings.size() == kListed) {
      ++more_tensors;
      more_values += entry.near_midpoint;
      continue;
    }
    set.warnings.push_back("golden " + entry.tensor.name + ": " +
                           std::to_string(entry.near_midpoint) + " value(s) within the " +
                           reference.precision.name() +
                           " error budget of a rounding midpoint (first at flat index " +
                           std::to_string(entry.first_near_midpoint) +
                           "); an exact reference could round them the other way");
  }
  if (more_tensors > 0) {
    set.warnings.push_back("and " + std::to_string(more_tensors) + " more golden tensor(s) with " +
                           std::to_string(more_values) +
                           " such value(s): manifest.json gives each tensor's \"near_midpoint\"");
  }
  assign_files(set.entries, options.format);
  if (options.write_bf16 || options.write_f16) {
    set.budgets = compute_budgets(scenario, reference, set.entries);
    for (std::size_t i = 0; i < set.entries.size(); ++i)
      set.entries[i].budget = set.budgets->per_entry[i];
  }
  set.manifest = golden_detail::manifest_text(scenario, reference, set, options);
  if (options.format == GoldenFormat::safetensors) {
    std::vector<RawTensor> raws;
    for (const GoldenEntry& entry : set.entries) raws.push_back(entry.tensor);
    set.safetensors =
        encode_safetensors(raws, golden_detail::safetensors_metadata(
                                     kShardsimVersion, scenario.name, sha256_hex(scenario.text),
                                     reference.precision.name(),
                                     std::string(reduce_order_name(reference.reduce_order))));
  }
  return set;
}

void parse_golden_dtypes(std::string_view text, GoldenOptions& options) {
  GoldenOptions chosen = options;
  chosen.write_f64 = chosen.write_f32 = chosen.write_bf16 = chosen.write_f16 = false;
  std::size_t begin = 0;
  std::vector<std::string_view> seen;  // dtypes chosen so far ("both" and "all" expanded)
  while (true) {
    const std::size_t comma = text.find(',', begin);
    const std::string_view name =
        text.substr(begin, comma == std::string_view::npos ? comma : comma - begin);
    const bool all = name == "all";
    const bool both = name == "both";
    if (!all && !both && name != "f64" && name != "f32" && name != "bf16" && name != "f16") {
      throw InputError(
          "--dtype: expected a comma-separated list of f64, f32, bf16 and f16, or "
          "both (f64,f32) or all, got " +
          quote(std::string(text)));
    }
    for (const std::string_view dtype : {"f64", "f32", "bf16", "f16"}) {
      const bool named = name == dtype || all || (both && (dtype == "f64" || dtype == "f32"));
      if (!named) continue;
      if (std::find(seen.begin(), seen.end(), dtype) != seen.end()) {
        throw InputError("--dtype: " + quote(std::string(dtype)) + " is listed twice in " +
                         quote(std::string(text)) + " (both: f64,f32; all: every dtype)");
      }
      seen.push_back(dtype);
    }
    chosen.write_f64 = chosen.write_f64 || name == "f64" || both || all;
    chosen.write_f32 = chosen.write_f32 || name == "f32" || both || all;
    chosen.write_bf16 = chosen.write_bf16 || name == "bf16" || all;
    chosen.write_f16 = chosen.write_f16 || name == "f16" || all;
    if (comma == std::string_view::npos) break;
    begin = comma + 1;
  }
  options = chosen;
}

void prepare_golden_dir(const std::string& dir) {
  check_outputs({{.flag = "--golden", .path = dir, .directory = true}}, {});
}

void write_goldens(const std::string& dir, const GoldenSet& set, const GoldenOptions& options) {
  prepare_golden_dir(dir);
  const bool created = ::mkdir(dir.c_str(), 0755) == 0;
  if (!created && errno != EEXIST) {
    throw InputError(dir + ": cannot create the directory: " + std::strerror(errno));
  }
  const std::string prefix = dir.ends_with('/') ? dir : dir + "/";
  // One unit (io.hpp): every file is complete before any is renamed, the manifest last; an error
  // or a signal leaves the previous files (or, in a new directory, nothing).
  std::vector<std::string> npy;
  std::vector<std::pair<std::string, std::string_view>> files;
  if (options.format == GoldenFormat::safetensors) {
    files.emplace_back(prefix + std::string(format::kGoldenSafetensorsFile), set.safetensors);
  } else {
    npy.reserve(set.entries.size());
    for (const GoldenEntry& entry : set.entries) {
      npy.push_back(encode_npy(entry.tensor));
      files.emplace_back(prefix + entry.file, npy.back());
    }
  }
  files.emplace_back(prefix + std::string(format::kManifestFile), set.manifest);
  write_files_atomically(files, created ? dir : std::string());
}

}  // namespace shardsim
