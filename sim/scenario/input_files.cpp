// Inputs from files: init = { file = "inputs.safetensors", tensor = "fc1.weight" } or
// init = { file = "x.npy" }. The file is read whole and decoded by the codecs `shardsim compare`
// uses (io/tensor_file.hpp): every length in it is checked against the file's size before
// anything is allocated, and a file that is truncated, has a hole or trailing bytes is rejected,
// so a tensor is never read partially. The values are kept as doubles: F32, BF16 and F16 convert
// exactly, F64 values are themselves (an f32 run rounds them once, in the runner).
#include <algorithm>
#include <cmath>
#include <filesystem>

#include "io/tensor_file.hpp"
#include "core/io.hpp"
#include "core/sha256.hpp"
#include "scenario/loader.hpp"

namespace shardsim {

struct Loader::InputFile {
  std::string sha256;              // of the file's bytes
  bool npy = false;                // one unnamed tensor
  std::vector<RawTensor> tensors;  // in the file's data order
};

namespace {

// `path` relative to the directory of the scenario file (as given); absolute paths unchanged.
std::string resolve(const std::string& scenario_file, const std::string& path) {
  if (path.starts_with('/')) return path;
  const std::size_t slash = scenario_file.find_last_of('/');
  return slash == std::string::npos ? path : scenario_file.substr(0, slash + 1) + path;
}

// "[32, 16]"
std::string extents_str(const std::vector<std::int64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    out += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return out + "]";
}

// The row-major index of flat position `flat` in `shape`, e.g. "[0, 3, 7]".
std::string index_str(const std::vector<std::int64_t>& shape, std::int64_t flat) {
  std::vector<std::int64_t> index(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  return extents_str(index);
}

bool exact_input_dtype(format::Dtype dtype) {
  using format::Dtype;
  return dtype == Dtype::f64 || dtype == Dtype::f32 || dtype == Dtype::bf16 || dtype == Dtype::f16;
}

}  // namespace

const Loader::InputFile& Loader::input_file(const toml::node& node, const std::string& path,
                                            const std::string& resolved) const {
  if (auto it = input_files_.find(resolved); it != input_files_.end()) return *it->second;
  auto file = std::make_shared<InputFile>();
  file->npy = resolved.ends_with(".npy");
  if (!file->npy && !resolved.ends_with(".safetensors")) {
    fail(node, path, quote(resolved) + " is neither a .safetensors nor a .npy file");
  }
  // A FIFO or device (/dev/zero behind a .npy symlink) could be read forever: only regular
  // files (after symlinks) are read. A missing file is left to read_file's message.
  std::error_code error;
  const auto status = std::filesystem::status(resolved, error);
  if (std::filesystem::exists(status) && !std::filesystem::is_regular_file(status)) {
    fail(node, path, quote(resolved) + " is not a regular file");
  }
  const std::string bytes = wrap(node, path, [&] { return read_file(resolved); });
  wrap(node, path, [&] {
    if (file->npy) {
      file->tensors.push_back(decode_npy(bytes, resolved));
    } else {
      file->tensors = decode_safetensors(bytes, resolved).tensors;
    }
  });
  file->sha256 = sha256_hex(bytes);
  return *input_files_.emplace(resolved, std::move(file)).first->second;
}

Loader::FileTensor Loader::file_tensor(const toml::table& t, const std::string& path,
                                       InitSpec& spec) const {
  check_keys(t, path, {"file", "tensor"});
  const toml::node& file_node = *t.get("file");
  spec.dist = InitDist::file;
  spec.file = string(file_node, path + ".file");
  if (spec.file.empty()) fail(file_node, path + ".file", "the file name must not be empty");
  const std::string resolved = resolve(file_, spec.file);
  const InputFile& file = input_file(file_node, path + ".file", resolved);
  const RawTensor* raw = nullptr;
  const toml::node* name_node = t.get("tensor");
  if (file.npy) {
    if (name_node) {
      fail(*name_node, path + ".tensor",
           "an .npy file holds one unnamed tensor: omit 'tensor' for " + quote(spec.file));
    }
    raw = &file.tensors.front();
  } else {
    if (!name_node) fail(t, path, "a safetensors file needs 'tensor', the tensor's name");
    spec.file_tensor = string(*name_node, path + ".tensor");
    std::vector<std::string> names;
    for (const RawTensor& candidate : file.tensors) {
      if (candidate.name == spec.file_tensor) raw = &candidate;
      names.push_back(candidate.name);
    }
    if (!raw) {
      const std::string hint = nearest(spec.file_tensor, names);
      fail(*name_node, path + ".tensor",
           "no tensor " + quote(spec.file_tensor) + " in " + quote(spec.file) +
               (hint.empty() ? "" : " (did you mean " + quote(hint) + "?)"));
    }
  }
  spec.file_dtype = std::string(format::dtype_info(raw->dtype).safetensors);
  spec.file_sha256 = file.sha256;
  spec.file_read = resolved;
  spec.file_shape = raw->shape;
  // Problems of the tensor itself are located at its name (at the file for an npy).
  return {raw, name_node ? name_node : &file_node, path + (name_node ? ".tensor" : ".file"),
          (file.npy ? "" : quote(spec.file_tensor) + " in ") + quote(spec.file)};
}

InitSpec Loader::init_file(const toml::table& t, const std::string& path) const {
  InitSpec spec;
  const FileTensor found = file_tensor(t, path, spec);
  const RawTensor* raw = found.raw;
  if (!exact_input_dtype(raw->dtype)) {
    fail(*found.at, found.at_path,
         found.what + " has dtype " + spec.file_dtype +
             "; inputs are read exactly from F64, F32, BF16 or F16 (token ids: declare the "
             "tensor dtype = \"i64\")");
  }
  std::vector<double> values = raw_values(*raw);
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (std::isfinite(values[i])) continue;
    fail(*found.at, found.at_path,
         "element " + index_str(raw->shape, static_cast<std::int64_t>(i)) + " of " + found.what +
             " is " + format_number(values[i]) + ": inputs must be finite");
  }
  spec.values = std::make_shared<const std::vector<double>>(std::move(values));
  return spec;
}

// dtype = "i64": the only dtype a tensor declares; then the tensor's values (ids_init).
void Loader::ids_dtype(const toml::table& t, const toml::node& dtype, const toml::node& node,
                       const std::string& path, TensorSpec& spec) const {
  const std::string text = string(dtype, path + ".dtype");
  if (text != "i64") {
    fail(dtype, path + ".dtype",
         "unknown dtype " + quote(text) +
             ": \"i64\" declares token ids or labels; a floating tensor leaves dtype out "
             "(it takes the run's precision)");
  }
  if (spec.role == TensorRole::parameter) {
    fail(*t.get("role"), path + ".role", "an i64 tensor is data, not a parameter");
  }
  const toml::node* init_node = t.get("init");
  if (!init_node) {
    fail(node, path,
         "an i64 tensor needs init = { dist = \"randint\", low, high } or a file "
         "(init = { file, tensor })");
  }
  spec.ids = ids_init(*init_node, path + ".init", spec);
}

// An i64 tensor's values: init = { dist = "randint", low, high [, seed] } drawn by
// randint_value at every element's global flat index, or an I64/I32 file (input_files.cpp).
std::shared_ptr<const std::vector<std::int64_t>> Loader::ids_init(const toml::node& node,
                                                                   const std::string& path,
                                                                   TensorSpec& spec) const {
  const toml::table& t = table(node, path);
  if (t.get("file")) {
    std::vector<std::int64_t> values = ids_file(t, path, spec);
    check_init_file_shape(node, path, spec);
    return std::make_shared<const std::vector<std::int64_t>>(std::move(values));
  }
  check_keys(t, path, {"dist", "low", "high", "seed"});
  const toml::node* dist_node = t.get("dist");
  if (!dist_node) {
    fail(node, path, "an i64 tensor needs dist = \"randint\" (keys low, high) or a file");
  }
  const std::string dist = string(*dist_node, path + ".dist");
  if (dist != "randint") {
    fail(*dist_node, path + ".dist",
         "an i64 tensor is drawn with dist = \"randint\" (integers in [low, high)), not " +
             quote(dist));
  }
  for (const char* key : {"low", "high"}) {
    if (!t.get(key)) fail(node, path, std::string("dist = \"randint\" needs ") + key);
  }
  const std::int64_t low = integer(*t.get("low"), path + ".low");
  const std::int64_t high = integer(*t.get("high"), path + ".high");
  if (!(low < high)) fail(node, path, "randint init needs low < high (high is excluded)");
  if (static_cast<std::uint64_t>(high) - static_cast<std::uint64_t>(low) >
      (std::uint64_t{1} << 32)) {
    fail(node, path, "randint init draws from at most 2^32 values (high - low <= 4294967296)");
  }
  if (auto* v = t.get("seed")) {
    const std::int64_t seed = integer(*v, path + ".seed");
    if (seed < 0) fail(*v, path + ".seed", "seed must be >= 0");
    spec.init_seed = static_cast<std::uint64_t>(seed);
  }
  spec.init.low = static_cast<double>(low);
  spec.init.high = static_cast<double>(high);
  std::vector<std::int64_t> values(static_cast<std::size_t>(spec.shape.numel()));
  for (std::size_t i = 0; i < values.size(); ++i) {
    values[i] = randint_value(low, high, spec.init_seed, i);
  }
  return std::make_shared<const std::vector<std::int64_t>>(std::move(values));
}

std::vector<std::int64_t> Loader::ids_file(const toml::table& t, const std::string& path,
                                           TensorSpec& spec) const {
  const FileTensor found = file_tensor(t, path, spec.init);
  const RawTensor* raw = found.raw;
  const std::size_t width = raw->dtype == format::Dtype::i64   ? 8
                            : raw->dtype == format::Dtype::i32 ? 4
                                                               : 0;
  if (width == 0) {
    fail(*found.at, found.at_path,
         found.what + " has dtype " + spec.init.file_dtype +
             "; an i64 tensor is read from I64 or I32 values");
  }
  std::vector<std::int64_t> values(static_cast<std::size_t>(raw->numel()));
  for (std::size_t i = 0; i < values.size(); ++i) {
    std::uint64_t bits = 0;  // little-endian, as both formats store them
    for (std::size_t b = 0; b < width; ++b) {
      bits |= std::uint64_t{static_cast<unsigned char>(raw->bytes[i * width + b])} << (8 * b);
    }
    if (width == 4) bits = static_cast<std::uint64_t>(static_cast<std::int64_t>(
                        static_cast<std::int32_t>(static_cast<std::uint32_t>(bits))));
    values[i] = static_cast<std::int64_t>(bits);
  }
  return values;
}

void Loader::check_init_file_shape(const toml::node& node, const std::string& path,
                                   const TensorSpec& spec) const {
  std::vector<std::int64_t> declared;
  for (const Axis& axis : spec.shape.axes()) declared.push_back(axis.extent);
  if (declared == spec.init.file_shape) return;
  const std::string what =
      (spec.init.file_tensor.empty() ? "" : quote(spec.init.file_tensor) + " in ") +
      quote(spec.init.file);
  fail(node, path,
       what + " has shape " + extents_str(spec.init.file_shape) + ", but " + quote(spec.name) +
           " declares " + spec.shape.str());
}

std::vector<std::string> input_paths(const Scenario& scenario) {
  std::vector<std::string> out{scenario.file};
  std::vector<const TensorSpec*> all;
  for (const TensorSpec& spec : scenario.tensors) all.push_back(&spec);
  for (const TensorSpec& spec : scenario.id_tensors) all.push_back(&spec);
  for (const TensorSpec* tensor : all) {
    const TensorSpec& spec = *tensor;
    if (spec.init.dist != InitDist::file) continue;
    if (std::find(out.begin(), out.end(), spec.init.file_read) == out.end()) {
      out.push_back(spec.init.file_read);
    }
  }
  return out;
}

}  // namespace shardsim
