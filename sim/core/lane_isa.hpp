// The instruction set the f32/f64 lane kernels run with (core/lane_sums.hpp). Every choice gives
// the same bits: the kernels' order is fixed by the source, each vector operation is the IEEE
// operation lane by lane, and nothing is fused (no FMA: -ffp-contract=off, and the AVX2 target
// does not include FMA). AVX2 only makes the same operations run on 256-bit registers. (The one
// exception is which payload a NaN carries when two NaNs meet in one operation: x86 keeps the
// first operand's, and the compiler may order a commutative operation's operands differently in
// the two copies. A NaN stays a NaN, and the comparator reports every NaN as "NaN".)
#pragma once

namespace shardsim {

enum class LaneIsa { sse2, avx2 };

// Whether this CPU runs AVX2 code.
bool cpu_has_avx2();

// The instruction set in use: AVX2 where the CPU has it, else SSE2 (the x86-64 baseline; off
// x86-64, the compiler's default for the target).
LaneIsa lane_isa();

// Selects the instruction set (tests and tools/bench run the kernels both ways and compare the
// bits). AVX2 on a CPU without it is a broken invariant (SHARDSIM_ASSERT: callers check
// cpu_has_avx2 first).
void set_lane_isa(LaneIsa isa);

}  // namespace shardsim
