// Private to the scenario loader: the state threaded through step validation.
#pragma once

#include <map>
#include <string>

#include "shardsim/error.hpp"
#include "shardsim/scenario/scenario.hpp"

namespace shardsim {

struct TensorState {
  Shape shape;
  Placement placement;
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
