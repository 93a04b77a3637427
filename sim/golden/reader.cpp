// Reading a golden directory (manifest + safetensors or npy files) and a candidate (a
// safetensors file or a directory of .npy files). Every file is treated as hostile input, and
// every filesystem call reports its error instead of throwing one (a path too long, a symlink
// loop, an unreadable parent are InputErrors naming the path).
#include <algorithm>
#include <filesystem>

#include "core/error.hpp"
#include "golden/golden_set.hpp"
#include "core/io.hpp"
#include "core/sha256.hpp"
#include "golden/manifest.hpp"

namespace shardsim {

namespace {

namespace fs = std::filesystem;

// The manifest of a large golden set holds the scenario text (at most 64 MiB) and about 1 KiB
// per tensor.
constexpr std::uint64_t kMaxManifestBytes = std::uint64_t{1} << 30;

void check_against_manifest(const GoldenInfo& info, const RawTensor& tensor, const std::string& what) {
  if (tensor.dtype != info.dtype) {
    throw InputError(what + ": tensor " + quote(info.name) + " is " +
                     std::string(format::dtype_info(tensor.dtype).safetensors) +
                     ", the manifest says " +
                     std::string(format::dtype_info(info.dtype).safetensors));
  }
  if (tensor.shape != info.shape) {
    throw InputError(what + ": tensor " + quote(info.name) +
                     " has a different shape than the manifest says");
  }
  if (sha256_hex(tensor.bytes) != info.sha256) {
    throw InputError(what + ": tensor " + quote(info.name) +
                     ": SHA-256 of its bytes does not match the manifest (corrupt golden file)");
  }
}

// Whether `path` is a directory; a path that cannot be examined (too long, a symlink loop, an
// unreadable parent) is an InputError, a missing one is not a directory.
bool is_directory(const std::string& path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (ec && ec != std::errc::no_such_file_or_directory) {
    throw InputError(path + ": cannot examine: " + ec.message());
  }
  return fs::is_directory(status);
}

}  // namespace

GoldenDir load_golden_dir(const std::string& dir) {
  if (!is_directory(dir)) {
    throw InputError(dir + ": GOLDEN must be a directory written by 'shardsim run --golden'");
  }
  const std::string prefix = dir.ends_with('/') ? dir : dir + "/";
  const std::string manifest_path = prefix + std::string(format::kManifestFile);
  GoldenDir out =
      golden_detail::parse_manifest(read_file(manifest_path, kMaxManifestBytes), manifest_path);
  out.path = dir;
  if (out.storage == "safetensors") {
    const std::string path = prefix + std::string(format::kGoldenSafetensorsFile);
    SafetensorsFile file = read_safetensors(path);
    // The header's __metadata__ must be the one the manifest implies (manifest.hpp), and the
    // file must hold the manifest's tensors and no other: then every byte of the header says
    // what the manifest, covered by its digest, says.
    for (const auto& [key, value] : out.safetensors_metadata) {
      auto found = file.metadata.find(key);
      if (found == file.metadata.end() || found->second != value) {
        throw InputError(path + ": __metadata__." + key +
                         " does not match the manifest (expected " + quote(value) + ")");
      }
    }
    if (file.metadata.size() != out.safetensors_metadata.size()) {
      throw InputError(path + ": __metadata__ holds keys the manifest does not give");
    }
    if (file.tensors.size() != out.infos.size()) {
      throw InputError(path + ": holds " + std::to_string(file.tensors.size()) +
                       " tensors, the manifest lists " + std::to_string(out.infos.size()));
    }
    std::map<std::string, RawTensor> by_name;
    for (RawTensor& t : file.tensors) by_name.emplace(t.name, std::move(t));
    for (const GoldenInfo& info : out.infos) {
      auto found = by_name.find(info.name);
      if (found == by_name.end()) {
        throw InputError(path + ": tensor " + quote(info.name) +
                         " listed in the manifest is missing");
      }
      check_against_manifest(info, found->second, path);
      out.tensors.emplace(info.name, std::move(found->second));
    }
    return out;
  }
  for (const GoldenInfo& info : out.infos) {
    const std::string path = prefix + info.file;
    RawTensor tensor = read_npy(path);
    tensor.name = info.name;
    // BF16 has no npy dtype: its golden file holds the bit patterns as '<u2' (encode_npy).
    if (info.dtype == format::Dtype::bf16 && tensor.dtype == format::Dtype::u16) {
      tensor.dtype = format::Dtype::bf16;
    }
    check_against_manifest(info, tensor, path);
    out.tensors.emplace(info.name, std::move(tensor));
  }
  return out;
}

Candidate load_candidate(const std::string& path) {
  Candidate out;
  if (!is_directory(path)) {
    out.tensors = read_safetensors(path).tensors;
    return out;
  }
  out.is_npy_dir = true;
  std::vector<fs::path> files;
  std::error_code ec;
  fs::directory_iterator it(path, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    std::error_code type_ec;
    if (it->path().extension() == ".npy" && it->is_regular_file(type_ec))
      files.push_back(it->path());
  }
  if (ec) throw InputError(path + ": cannot list the directory: " + ec.message());
  std::sort(files.begin(), files.end());
  if (files.empty()) throw InputError(path + ": the candidate directory holds no .npy files");
  for (const fs::path& file : files) {
    RawTensor tensor = read_npy(file.string());
    tensor.name = file.stem().string();
    out.tensors.push_back(std::move(tensor));
  }
  return out;
}

}  // namespace shardsim
