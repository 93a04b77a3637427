// Deterministic parallel loops.
//
// parallel_for(n, body) runs body(0) ... body(n - 1), each exactly once, on up to thread_count()
// threads (the calling thread included). The contract that keeps results independent of the
// thread count and of timing:
//   - body(i) writes only what belongs to index i (one rank's local tensors, one row, one head)
//     and reads nothing another index writes; no reduction crosses indices inside a parallel_for
//     (sums over ranks or rows stay in the serial code around it, in their documented order);
//   - an index's work is the same whichever thread runs it: a thread's mp precision and narrow
//     format (narrow_float.hpp) are set to the caller's before it runs anything (both are kept
//     per thread).
// A parallel_for called from inside another one (a rank's kernel inside the loop over ranks) is
// shared with the threads that are idle at that moment (their part of the outer loop done), and
// runs serially on its thread when none is: nesting never oversubscribes, and a slow rank's rows
// or heads still use every core. When bodies throw, every index still runs or is skipped after the
// first failure, and the exception of the smallest failing index is rethrown to the caller.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

namespace shardsim {

// The threads parallel_for may use; at least 1. Defaults to the machine's cores.
int thread_count();
// REQUIRES: threads >= 1. Takes effect for the next parallel_for.
void set_thread_count(int threads);
// Parses a --threads / SHARDSIM_THREADS value: a whole number from 1 to kMaxThreads.
// Throws InputError naming `origin` otherwise.
inline constexpr int kMaxThreads = 1024;
int parse_thread_count(std::string_view text, std::string_view origin);

void parallel_for(std::int64_t n, const std::function<void(std::int64_t)>& body);

}  // namespace shardsim
