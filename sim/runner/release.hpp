// Which runner entries a run may still read: the rules by which the runner releases tensors
// during backward, and after each step of a forward-only run (runner-inl.hpp).
#pragma once

#include <set>
#include <string>
#include <variant>
#include <vector>

#include "scenario/scenario.hpp"
#include "core/trace.hpp"

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

// The live names of a forward-only run (no training step, no micro-batches) once steps
// [0, next) have run forward: the pinned entries, and every name a step still to run names (any
// string value of its spec) with the entries derived from it. A boundary is compared when it is
// recorded and no backward will run, so nothing else is read again: a step's output, its parts
// (statistics, attention's q/k/v, moved copies) go as soon as no later step names it.
inline LiveNames forward_live_names(const std::vector<StepSpec>& steps, std::size_t next,
                                    const std::set<std::string>& pinned) {
  LiveNames live{pinned, {}, {}};
  for (std::size_t j = next; j < steps.size(); ++j) {
    for (const auto& [key, value] : steps[j].params) {
      if (const auto* name = std::get_if<std::string>(&value.value)) live.values.push_back(*name);
    }
  }
  return live;
}

}  // namespace shardsim
