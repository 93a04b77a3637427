// Which runner entries a training step may still read: the rule by which the runner releases
// tensors during backward (runner-inl.hpp, release_dead_tensors).
#pragma once

#include <set>
#include <string>
#include <variant>
#include <vector>

#include "shardsim/scenario/scenario.hpp"
#include "shardsim/trace.hpp"

namespace shardsim {

// An entry is kept when it is pinned (the scenario's declared tensors and the parameters'
// gradients: the next training step or the update reads them), or derived from a tensor named
// by a step still to run backward (any string value of its spec; its `output` only when that
// step's backward reads it), or derived from grad(N) for any name N of such a step (its
// gradient may still be read or accumulated into). Anything else no one reads again.
struct LiveNames {
  std::set<std::string> pinned;
  std::vector<std::string> values;  // names whose values, and entries derived from them, stay
  std::vector<std::string> grads;   // grad(N) for every name N of a remaining step

  bool keeps(const std::string& key) const {
    if (pinned.count(key)) return true;
    for (const std::string& name : is_grad_name(key) ? grads : values) {
      if (derived_from(key, name)) return true;
    }
    return false;
  }
};

// The live names while steps [0, reads_output.size()) have yet to run backward;
// reads_output[j] is step j's StepOp::backward_reads_output().
inline LiveNames live_names(const std::vector<StepSpec>& steps,
                            const std::vector<bool>& reads_output,
                            const std::set<std::string>& pinned) {
  LiveNames live{pinned, {}, {}};
  for (std::size_t j = 0; j < reads_output.size(); ++j) {
    for (const auto& [key, value] : steps[j].params) {
      const auto* name = std::get_if<std::string>(&value.value);
      if (!name) continue;
      live.grads.push_back(grad_name(*name));
      if (key != "output" || reads_output[j]) live.values.push_back(*name);
    }
  }
  return live;
}

}  // namespace shardsim
