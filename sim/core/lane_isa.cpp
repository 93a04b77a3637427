// The lane kernels' instruction set (lane_isa.hpp): detected once, settable by tests.
#include "core/lane_isa.hpp"

#include <atomic>

#include "core/error.hpp"

namespace shardsim {

namespace {

LaneIsa detected_isa() { return cpu_has_avx2() ? LaneIsa::avx2 : LaneIsa::sse2; }

std::atomic<LaneIsa>& current_isa() {
  static std::atomic<LaneIsa> isa{detected_isa()};
  return isa;
}

}  // namespace

bool cpu_has_avx2() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  return __builtin_cpu_supports("avx2");
#else
  return false;
#endif
}

LaneIsa lane_isa() { return current_isa().load(std::memory_order_relaxed); }

void set_lane_isa(LaneIsa isa) {
  SHARDSIM_ASSERT(isa != LaneIsa::avx2 || cpu_has_avx2(), "set_lane_isa: this CPU has no AVX2");
  current_isa().store(isa, std::memory_order_relaxed);
}

}  // namespace shardsim
