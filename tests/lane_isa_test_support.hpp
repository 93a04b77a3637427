// The instruction sets a lane-kernel test runs under (lane_isa.hpp): SSE2, and AVX2 where the CPU
// has it. Tests run each kernel under every one and compare the bits.
#pragma once

#include <vector>

#include "core/lane_isa.hpp"

namespace lane_test {

// The instruction sets this CPU runs; restores the detected one when destroyed.
struct EachIsa {
  shardsim::LaneIsa detected = shardsim::lane_isa();
  std::vector<shardsim::LaneIsa> all() const {
    std::vector<shardsim::LaneIsa> isas{shardsim::LaneIsa::sse2};
    if (shardsim::cpu_has_avx2()) isas.push_back(shardsim::LaneIsa::avx2);
    return isas;
  }
  ~EachIsa() { shardsim::set_lane_isa(detected); }
};

}  // namespace lane_test
