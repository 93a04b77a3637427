// Test helpers of the fsdp tests: a boundary sink that keeps every boundary (the oracle's tensor
// and the ranks'), looked up by op and tensor, and a replay of a scenario text at f64 through it.
#pragma once

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "compare/compare.hpp"
#include "runner/runner.hpp"
#include "scenario/scenario.hpp"

namespace fsdp_test {

struct Seen {
  shardsim::TraceEntry entry;
  shardsim::Tensor<double> dense;
  shardsim::DistTensor<double> sharded;
};

class Recorder final : public shardsim::BoundarySink<double> {
 public:
  bool on_boundary(const shardsim::TraceEntry& entry, const shardsim::Tensor<double>* dense,
                   const shardsim::DistTensor<double>& sharded) override {
    seen.push_back({entry, dense ? *dense : shardsim::Tensor<double>(), sharded});
    return false;
  }
  void on_activation_memory(const shardsim::ActivationMemory& m) override { memory = m; }
  const Seen& at(const std::string& op, const std::string& tensor) const {
    for (const Seen& s : seen) {
      if (s.entry.op == op && s.entry.tensor == tensor) return s;
    }
    FAIL("no boundary " << op << " -> " << tensor);
    return seen.front();
  }
  std::vector<Seen> seen;
  shardsim::ActivationMemory memory;
};

inline Recorder replay(const std::string& text) {
  const shardsim::Scenario s = shardsim::parse_scenario(text, "tiny.toml");
  Recorder recorder;
  shardsim::run_scenario<double>(s, {}, recorder);
  return recorder;
}

}  // namespace fsdp_test
