// Reading a golden directory (manifest + safetensors or npy files) and a candidate (a
// safetensors file or a directory of .npy files). Every file is treated as hostile input.
#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "shardsim/error.hpp"
#include "shardsim/golden/golden_set.hpp"
#include "shardsim/io.hpp"
#include "shardsim/sha256.hpp"

namespace shardsim {

namespace {

using Json = nlohmann::ordered_json;
namespace fs = std::filesystem;

// Typed access to the manifest with located errors ("DIR/manifest.json: tensors[3].shape: ...").
class ManifestReader {
 public:
  explicit ManifestReader(std::string what) : what_(std::move(what)) {}

  [[noreturn]] void fail(const std::string& path, const std::string& message) const {
    throw InputError(what_ + ": " + path + ": " + message);
  }
  const Json& member(const Json& object, const std::string& path, const std::string& key) const {
    if (!object.is_object()) fail(path, "expected an object");
    auto found = object.find(key);
    if (found == object.end()) fail(path, "missing key '" + key + "'");
    return *found;
  }
  std::string string(const Json& object, const std::string& path, const std::string& key) const {
    const Json& v = member(object, path, key);
    if (!v.is_string()) fail(path + "." + key, "expected a string, got " + v.dump());
    return v.get<std::string>();
  }
  std::int64_t integer(const Json& v, const std::string& path) const {
    if (!v.is_number_integer()) fail(path, "expected an integer, got " + v.dump());
    if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)) {
      fail(path, "integer too large");
    }
    return v.get<std::int64_t>();
  }
  std::int64_t integer(const Json& object, const std::string& path, const std::string& key) const {
    return integer(member(object, path, key), path + "." + key);
  }

 private:
  std::string what_;
};

Json parse_json(const std::string& text, const std::string& what) {
  auto depth_limit = [&](int depth, Json::parse_event_t, Json&) {
    if (depth > 32) throw InputError(what + ": invalid JSON: nested deeper than 32 levels");
    return true;
  };
  try {
    return Json::parse(text, depth_limit);
  } catch (const Json::exception& e) {
    throw InputError(what + ": invalid JSON: " + e.what());
  }
}

GoldenInfo parse_info(const ManifestReader& m, const Json& item, const std::string& path, int ranks) {
  GoldenInfo info;
  info.name = m.string(item, path, "name");
  info.file = m.string(item, path, "file");
  if (info.file.empty() || info.file.find('/') != std::string::npos || info.file.front() == '.') {
    m.fail(path + ".file", "'" + info.file + "' must be a plain file name inside the directory");
  }
  const std::string dtype = m.string(item, path, "dtype");
  const auto parsed = format::dtype_from_safetensors(dtype);
  if (!parsed) m.fail(path + ".dtype", "unknown dtype '" + dtype + "'");
  info.dtype = *parsed;
  const Json& shape = m.member(item, path, "shape");
  const Json& axes = m.member(item, path, "axes");
  if (!shape.is_array() || !axes.is_array() || shape.size() != axes.size() || shape.size() > 64) {
    m.fail(path + ".shape", "shape and axes must be arrays of the same length");
  }
  for (std::size_t a = 0; a < shape.size(); ++a) {
    const std::int64_t extent = m.integer(shape[a], path + ".shape[" + std::to_string(a) + "]");
    if (extent < 0) m.fail(path + ".shape", "negative extent");
    info.shape.push_back(extent);
    if (!axes[a].is_string()) m.fail(path + ".axes", "axis names must be strings");
    info.axes.push_back(axes[a].get<std::string>());
  }
  const Json& rank = m.member(item, path, "rank");
  if (!rank.is_null()) {
    const std::int64_t r = m.integer(rank, path + ".rank");
    if (r < 0 || r >= ranks) m.fail(path + ".rank", "rank out of range");
    info.rank = static_cast<int>(r);
    info.slice = m.string(item, path, "slice");
  }
  const Json& offset = m.member(item, path, "offset");
  if (!offset.is_object()) m.fail(path + ".offset", "expected an object");
  for (const auto& [axis, begin] : offset.items()) {
    info.offset[axis] = m.integer(begin, path + ".offset." + axis);
  }
  const Json& global = m.member(item, path, "global_shape");
  if (!global.is_object() || global.size() > 64) m.fail(path + ".global_shape", "expected an object");
  std::vector<Axis> global_axes;
  for (const auto& [axis, extent] : global.items()) {
    global_axes.push_back({axis, m.integer(extent, path + ".global_shape." + axis)});
    if (global_axes.back().extent < 0) m.fail(path + ".global_shape", "negative extent");
  }
  info.global_shape = Shape(std::move(global_axes));
  info.placement = m.string(item, path, "placement");
  info.ranks = ranks;
  info.sha256 = m.string(item, path, "sha256");
  const Json& boundary = m.member(item, path, "boundary");
  info.boundary = "#" + std::to_string(m.integer(boundary, path + ".boundary", "id")) + " step " +
                  std::to_string(m.integer(boundary, path + ".boundary", "step")) + " chunk " +
                  std::to_string(m.integer(boundary, path + ".boundary", "chunk")) + " " +
                  m.string(boundary, path + ".boundary", "op") + " -> " +
                  m.string(boundary, path + ".boundary", "tensor");
  return info;
}

void check_against_manifest(const GoldenInfo& info, const RawTensor& tensor, const std::string& what) {
  if (tensor.dtype != info.dtype) {
    throw InputError(what + ": tensor '" + info.name + "' is " +
                     std::string(format::dtype_info(tensor.dtype).safetensors) +
                     ", the manifest says " + std::string(format::dtype_info(info.dtype).safetensors));
  }
  if (tensor.shape != info.shape) {
    throw InputError(what + ": tensor '" + info.name + "' has a different shape than the manifest says");
  }
  if (sha256_hex(tensor.bytes) != info.sha256) {
    throw InputError(what + ": tensor '" + info.name +
                     "': SHA-256 of its bytes does not match the manifest (corrupt golden file)");
  }
}

}  // namespace

GoldenDir load_golden_dir(const std::string& dir) {
  const std::string prefix = dir.ends_with('/') ? dir : dir + "/";
  const std::string manifest_path = prefix + std::string(format::kManifestFile);
  if (!fs::is_directory(dir)) {
    throw InputError(dir + ": GOLDEN must be a directory written by 'shardsim run --golden'");
  }
  const Json manifest = parse_json(read_file(manifest_path), manifest_path);
  const ManifestReader m(manifest_path);
  if (!manifest.is_object() || m.string(manifest, "(root)", "format") != format::kManifestFormat) {
    m.fail("format", "not a shardsim golden manifest");
  }
  if (m.integer(manifest, "(root)", "format_version") != format::kManifestFormatVersion) {
    m.fail("format_version", "unsupported version (this shardsim reads version " +
                                 std::to_string(format::kManifestFormatVersion) + ")");
  }
  GoldenDir out;
  out.path = dir;
  out.precision = m.string(manifest, "(root)", "precision");
  const std::int64_t ranks = m.integer(manifest, "(root)", "ranks");
  if (ranks < 1 || ranks > 4096) m.fail("ranks", "out of range");
  const std::string storage = m.string(manifest, "(root)", "storage");
  if (storage != "safetensors" && storage != "npy") m.fail("storage", "expected safetensors or npy");
  const Json& tensors = m.member(manifest, "(root)", "tensors");
  if (!tensors.is_array()) m.fail("tensors", "expected an array");
  std::set<std::string> names;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    out.infos.push_back(parse_info(m, tensors[i], "tensors[" + std::to_string(i) + "]",
                                   static_cast<int>(ranks)));
    if (!names.insert(out.infos.back().name).second) {
      m.fail("tensors[" + std::to_string(i) + "].name", "duplicate name '" + out.infos.back().name + "'");
    }
  }
  if (storage == "safetensors") {
    const std::string path = prefix + std::string(format::kGoldenSafetensorsFile);
    SafetensorsFile file = decode_safetensors(read_file(path), path);
    std::map<std::string, RawTensor> by_name;
    for (RawTensor& t : file.tensors) by_name.emplace(t.name, std::move(t));
    for (const GoldenInfo& info : out.infos) {
      auto found = by_name.find(info.name);
      if (found == by_name.end()) {
        throw InputError(path + ": tensor '" + info.name + "' listed in the manifest is missing");
      }
      check_against_manifest(info, found->second, path);
      out.tensors.emplace(info.name, std::move(found->second));
    }
  } else {
    for (const GoldenInfo& info : out.infos) {
      const std::string path = prefix + info.file;
      RawTensor tensor = decode_npy(read_file(path), path);
      tensor.name = info.name;
      check_against_manifest(info, tensor, path);
      out.tensors.emplace(info.name, std::move(tensor));
    }
  }
  return out;
}

Candidate load_candidate(const std::string& path) {
  Candidate out;
  std::error_code error;
  if (fs::is_directory(path, error)) {
    out.is_npy_dir = true;
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(path, error)) {
      if (entry.is_regular_file() && entry.path().extension() == ".npy") files.push_back(entry.path());
    }
    if (error) throw InputError(path + ": cannot list the directory: " + error.message());
    std::sort(files.begin(), files.end());
    if (files.empty()) throw InputError(path + ": the candidate directory holds no .npy files");
    for (const fs::path& file : files) {
      RawTensor tensor = decode_npy(read_file(file.string()), file.string());
      tensor.name = file.stem().string();
      out.tensors.push_back(std::move(tensor));
    }
    return out;
  }
  out.tensors = decode_safetensors(read_file(path), path).tensors;
  return out;
}

}  // namespace shardsim
