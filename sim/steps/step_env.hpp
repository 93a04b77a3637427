// Private to the runner: the state every step handler works on.
#pragma once

#include <map>
#include <string>

#include "shardsim/runner.hpp"
#include "shardsim/world-inl.hpp"

namespace shardsim {

template <typename T>
struct StepEnv {
  const Scenario& scenario;
  World<T>& world;
  std::map<std::string, Tensor<T>>& dense;          // the oracle's global tensors
  std::map<std::string, DistTensor<T>>& sharded;    // the ranks' tensors

  // The oracle runs each step before the sharded plan, so that every sharded boundary finds its
  // dense counterpart when it is recorded.
  Tensor<T>& dense_at(const std::string& name) { return dense.at(name); }
  DistTensor<T>& sharded_at(const std::string& name) { return sharded.at(name); }
  const Tensor<T>* dense_opt(const StepSpec& step, const std::string& key) {
    return step.has(key) ? &dense.at(step.str(key)) : nullptr;
  }
  const DistTensor<T>* sharded_opt(const StepSpec& step, const std::string& key) {
    return step.has(key) ? &sharded.at(step.str(key)) : nullptr;
  }
};

}  // namespace shardsim
