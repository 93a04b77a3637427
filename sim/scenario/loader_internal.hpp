// Private to the scenario loader: the state threaded through step validation.
#pragma once

#include <map>
#include <string>

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
  Placement placement(const StepSpec& step, const std::string& key);
  // Defines the tensor named by step parameter `key`. Fails on a duplicate name.
  void define(const StepSpec& step, const std::string& key, TensorState state);
  [[noreturn]] void fail(const StepSpec& step, const std::string& key, const std::string& message);

 private:
  const std::string& file_;
  std::map<std::string, TensorState>& tensors_;
};

// Applies one op's shape and placement rules (op_table.cpp).
void infer_step(const StepSpec& step, StepContext& ctx);
// The MLP-block ops' rules (infer_mlp.cpp): linear; gelu, dropout and add.
void infer_linear(const StepSpec& step, StepContext& ctx, const TensorState& input);
void infer_elementwise(const StepSpec& step, StepContext& ctx, const TensorState& input);

// Whole-scenario plan checks once everything is loaded (op_table.cpp): rules that need the
// mesh or the faults. Throws a located InputError; prints warnings ("file:line:col: key:
// warning: ...") to stderr for plans that are valid but pointless.
void check_plans(const Scenario& scenario);

std::string located(const std::string& file, SourceLoc loc, const std::string& path,
                    const std::string& message);

}  // namespace shardsim
