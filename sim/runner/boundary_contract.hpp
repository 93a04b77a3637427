// Private to the runner: the boundary contract (trace.hpp, BoundaryLabel) as one function, so
// that the runner and its tests enforce the same rule.
#pragma once

#include <map>
#include <string>

#include "core/error.hpp"
#include "core/tensor.hpp"
#include "core/trace.hpp"

namespace shardsim {

// The oracle tensor boundary `entry` (recorded from `label`) is compared with: the dense tensor
// the label names, or null when the label declares it has none. Throws InternalError when the
// label names a tensor no step stored, or claims exactness without an oracle tensor.
template <typename T>
const Tensor<T>* find_oracle(const BoundaryLabel& label, const TraceEntry& entry,
                             const std::map<std::string, Tensor<T>>& dense) {
  auto describe = [&] {
    return "boundary #" + std::to_string(entry.id) + " (" + entry.op + " -> " + entry.tensor + ")";
  };
  if (label.has_oracle) {
    auto found = dense.find(label.dense_name());
    if (found == dense.end()) {
      throw InternalError(describe() + " names the oracle tensor '" + label.dense_name() +
                          "', which no step stored");
    }
    return &found->second;
  }
  if (label.exact) throw InternalError(describe() + " claims exactness but has no oracle tensor");
  return nullptr;
}

}  // namespace shardsim
