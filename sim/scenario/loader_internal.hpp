// Private to the scenario loader: the state threaded through step validation.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "scenario/scenario.hpp"

namespace shardsim {

struct TensorState {
  Shape shape;
  Layout layout;
  std::shared_ptr<const std::vector<std::int64_t>> ids;  // an i64 tensor's values; else null

  // The placement on the mesh dim `step` runs on.
  const Placement& placement(const StepSpec& step) const { return layout.on(step.mesh_dim); }
  // This tensor's layout with `placement` on the step's dim: a step's output keeps its input's
  // placements on every other dim.
  Layout with(const StepSpec& step, Placement placement) const {
    return layout.with(step.mesh_dim, std::move(placement));
  }
};

// Tracks defined tensors while the steps are validated in order, and formats located errors.
class StepContext {
 public:
  StepContext(const std::string& file, std::map<std::string, TensorState>& tensors)
      : file_(file), tensors_(tensors) {}

  // The state of the tensor named by step parameter `key`. Fails if it is not defined yet.
  const TensorState& tensor(const StepSpec& step, const std::string& key);
  // The state of the i64 tensor (token ids, labels) named by step parameter `key`; tensor()
  // refuses one, this refuses anything else.
  const TensorState& ids(const StepSpec& step, const std::string& key);
  // Defines the tensor named by step parameter `key`. Fails on a duplicate name.
  void define(const StepSpec& step, const std::string& key, TensorState state);
  [[noreturn]] void fail(const StepSpec& step, const std::string& key, const std::string& message);

  // On every mesh dim but the step's (the passive dims, where the step's local kernels run on
  // each member's rows unchanged): the tensor named by `key` is not Partial (unless
  // `allow_partial`) and shards none of `whole_axes` (the axes the op reduces over or needs
  // whole).
  void require_passive(const StepSpec& step, const std::string& key, const TensorState& state,
                       const std::vector<std::string>& whole_axes, bool allow_partial = false);
  // On every passive dim the tensor named by `key` is Replicate (a weight).
  void require_replicate_elsewhere(const StepSpec& step, const std::string& key,
                                   const TensorState& state);

  const Mesh* mesh = nullptr;  // the scenario's mesh, for the dim names in messages

 private:
  const std::string& file_;
  std::map<std::string, TensorState>& tensors_;
};

// Tensor names (names.cpp). "" when a scenario may name a tensor `name` by itself, else why not:
// letters, digits, '_', '.' and '-' only, and not a name the runner uses of its own (grad_norm,
// flat_param and their parts).
std::string tensor_name_problem(std::string_view name);
// "" unless `name` and a `defined` name are an owner and one of the parts the runner records for
// it (OWNER.PART, is_runner_part), in either order; then the message.
std::string tensor_name_clash(std::string_view name,
                              const std::map<std::string, TensorState>& defined);
// Whether `part`, the text after "OWNER.", is (up to an '@') a part that the runner or a plan
// records for a tensor named OWNER: y.mean, d.mask@repetition, attn.q_rot, ...
bool is_runner_part(std::string_view part);
// Whether `name` is or extends a name the runner uses of its own (grad_norm, flat_param).
bool is_runner_name(std::string_view name);
// The OWNER for which `name` is OWNER.PART, a part the runner records (is_runner_part), where
// `is_name(OWNER)` says OWNER is a tensor's name (every '.' of name may end an owner); "" when
// there is none.
template <typename IsName>
std::string_view runner_part_owner(std::string_view name, IsName&& is_name) {
  for (std::size_t dot = name.find('.'); dot != std::string_view::npos;
       dot = name.find('.', dot + 1)) {
    if (is_name(name.substr(0, dot)) && is_runner_part(name.substr(dot + 1))) {
      return name.substr(0, dot);
    }
  }
  return {};
}

std::string located(const std::string& file, SourceLoc loc, const std::string& path,
                    const std::string& message);

// An InputError whose message is located already ("file:line:col: key.path: ..."), so that
// relocating a bare error (TomlReader::wrap) never prints a location twice.
class LocatedError : public InputError {
 public:
  using InputError::InputError;
};

}  // namespace shardsim
