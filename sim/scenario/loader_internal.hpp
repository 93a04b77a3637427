// Private to the scenario loader: the state threaded through step validation.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "shardsim/error.hpp"
#include "shardsim/scenario/scenario.hpp"

namespace shardsim {

struct TensorState {
  Shape shape;
  Layout layout;

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

std::string located(const std::string& file, SourceLoc loc, const std::string& path,
                    const std::string& message);

// An InputError whose message is located already ("file:line:col: key.path: ..."), so that
// relocating a bare error (TomlReader::wrap) never prints a location twice.
class LocatedError : public InputError {
 public:
  using InputError::InputError;
};

}  // namespace shardsim
