// Private to the scenario loader: the sections of a scenario file, each read and validated into
// the model (scenario.hpp). Defined in loader.cpp (mesh, tensors, inits, the whole file) and
// loader_steps.cpp (steps, stream, faults, expectation).
#pragma once

#include <map>
#include <memory>

#include "scenario/op_entry.hpp"
#include "scenario/toml_reader.hpp"

namespace shardsim {

struct RawTensor;  // io/tensor_file.hpp

class Loader : public TomlReader {
 public:
  using TomlReader::TomlReader;

  // [blocks] instantiated into [[tensors]] and [[steps]] (loader_blocks.cpp), in place; first of
  // all. The copies' positions go into `origins`.
  void expand_blocks(toml::table& root, NodeOrigins& origins) const;
  void header(const toml::table& root, Scenario& s) const;
  void tensors(const toml::table& root, Scenario& s, std::map<std::string, TensorState>& defined);
  void steps(const toml::table& root, Scenario& s,
             std::map<std::string, TensorState>& defined) const;
  void training(const toml::table& root, Scenario& s) const;
  // optimizer = { kind, lr, betas, eps, weight_decay } (loader_optimizer.cpp); after training.
  void optimizer(const toml::table& root, Scenario& s) const;
  // micro_batches (loader_micro.cpp): k >= 1; with k >= 2 every input and target with the
  // batch axis has one extent that torch.chunk cuts into k non-empty pieces; refused with
  // [stream], dropout, a step that reduces over the batch axis or a loss on another batch axis.
  void micro_batches(const toml::table& root, Scenario& s) const;
  // clip_grad_norm and fsdp = { style, dim, param_dtype, reduce_dtype } (loader_fsdp.cpp); after
  // the steps and training.
  void fsdp(const toml::table& root, Scenario& s) const;
  std::optional<Precision> fsdp_dtype(const toml::table& t, const char* key) const;
  void fsdp_units(const Scenario& s, FsdpSpec& spec) const;
  void fsdp_check_param(const Scenario& s, const TensorSpec& tensor, const FsdpSpec& spec) const;

  MeshSpec mesh(const toml::table& t) const;
  Mesh mesh_dims(const toml::node& node) const;
  Layout layout(const toml::node& node, const std::string& path, const Mesh& mesh,
                const Shape& shape) const;

  InitSpec init(const toml::node& node, const std::string& path, std::uint64_t& seed) const;
  double init_number(const toml::node& node, const std::string& path) const;
  Magnitude tolerance_value(const toml::node& node, const std::string& path) const;

  // init = { file = PATH, tensor = NAME } (input_files.cpp): one tensor of a safetensors or npy
  // file, PATH relative to the scenario file's directory. Read like `shardsim compare` reads a
  // candidate (every length checked against the file size before anything is allocated, no
  // partial reads); F64, F32, BF16 and F16 only, every value finite. Called from init().
  InitSpec init_file(const toml::table& t, const std::string& path) const;
  // The tensor init = { file, tensor } names, read (its file details recorded in `spec`), and
  // where and how a message about it is located.
  struct FileTensor {
    const RawTensor* raw;
    const toml::node* at;
    std::string at_path;
    std::string what;  // "'x' in 'inputs.safetensors'" or "'x.npy'"
  };
  FileTensor file_tensor(const toml::table& t, const std::string& path, InitSpec& spec) const;
  // The file's shape must be the declared shape; the message names both.
  void check_init_file_shape(const toml::node& node, const std::string& path,
                             const TensorSpec& spec) const;

  // dtype = "i64": the values, drawn (randint) or read (ids_file); records the file's details in
  // spec.init as init_file does.
  std::shared_ptr<const std::vector<std::int64_t>> ids_init(const toml::node& node,
                                                            const std::string& path,
                                                            TensorSpec& spec) const;
  void ids_dtype(const toml::table& t, const toml::node& dtype, const toml::node& node,
                 const std::string& path, TensorSpec& spec) const;
  std::vector<std::int64_t> ids_file(const toml::table& t, const std::string& path,
                                     TensorSpec& spec) const;
  TensorSpec tensor(const toml::node& node, const std::string& path, std::uint64_t scenario_seed,
                    const Mesh& mesh);

  StepSpec step(const toml::node& node, int index, const Mesh& mesh) const;
  int step_mesh_dim(const toml::table& t, const std::string& path, const Mesh& mesh) const;

  // One step parameter's raw value, checked against its schema row: type, choices, bounds, and
  // for a placement its syntax.
  StepValue param(const toml::node& value, const std::string& key_path, const ParamSchema& p) const;

  template <typename Text>
  void check_bounds(const toml::node& value, const std::string& key_path, const ParamSchema& p,
                    double x, Text text) const {
    if (p.bounds.contains(x)) return;
    const std::string range = p.bounds.str();
    const bool interval = range.starts_with("[") || range.starts_with("(");
    fail(value, key_path,
         p.key + " must be " + (range.empty() ? "finite" : (interval ? "in " : "") + range) +
             (p.bounds.note.empty() ? "" : " " + p.bounds.note) + ", got " + text());
  }

  // [stream]: the chunk lengths must be positive and sum to the stream axis' extent in every
  // input and target that has the axis.
  StreamSpec stream(const toml::table& t, const Scenario& s) const;

  // A fault name that exists and changes something this scenario runs: one of its ops, or the
  // training loop.
  Fault fault(const toml::node& node, const std::string& path, const Scenario& s) const;
  // The fsdp_* faults need fsdp (fsdp_clip_padding: style flat and clip_grad_norm), and the
  // gradient all-reduce faults of replicated parameters are refused under fsdp.
  void check_fsdp_fault(const toml::node& node, const std::string& path, Fault fault,
                        const Scenario& s) const;

  // Refuses a listed fault (faults[i], in s.faults' order) that would change nothing this
  // scenario runs: a plan no step takes, or a case its data cannot reach (fault_plans.cpp).
  // Needs the steps, the layouts and [stream].
  void fault_plans(const toml::array& list, const Scenario& s) const;

  // [expect]; step and chunk within the scenario's training steps and streamed chunks (so the
  // stream is read first).
  Expectation expect(const toml::table& t, const Scenario& s) const;

 private:
  struct InputFile;  // one decoded tensor file and its SHA-256 (input_files.cpp)
  const InputFile& input_file(const toml::node& node, const std::string& path,
                              const std::string& resolved) const;
  // Files already read during this load, by resolved path: many tensors share one file.
  mutable std::map<std::string, std::shared_ptr<const InputFile>> input_files_;
};

}  // namespace shardsim
