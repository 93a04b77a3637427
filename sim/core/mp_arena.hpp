// GMP's memory functions (through which MPFR allocates its scratch, and an Mp value wider than
// 320 bits its limbs) served from per-thread pools of fixed-size blocks instead of malloc (issue
// 16: compact multiprecision).
//
// An Mp value (mp_backend.hpp) is 56 bytes inside the tensor with its limbs inline up to
// kMpInlineLimbs (mp256's 257 bits: 5 limbs), and allocates nothing; a wider one holds a block of
// 8 n bytes for its n limbs. From malloc that block costs its header and rounding and a
// malloc/free pair per value made or dropped; from the pools it costs its own size rounded up to
// 8 bytes, and making or dropping a value pushes or pops a free list. Values and their bits are
// untouched: this is allocation only.
//
// The pools (sim/core/mp_arena.cpp): blocks of up to kMpArenaMaxBlock bytes, in size classes of 8
// bytes, carved from 256 KiB chunks that are never returned (a freed block goes on the freeing
// thread's list for its class and is reused by that thread, or through a shared depot by others);
// larger requests go to malloc. GMP passes every block's size to free and realloc, so a block
// needs no header. Chunks stay listed in an immortal registry.
//
// What that costs: a class's memory serves only that class and, through the depot, classes down
// to half its block size (mp256's blocks serve mp128), so a process that ran several mp
// precisions one after another (`precision --levels mp128,mp256,...`, `run --precision
// mp128,mp256`) would keep each one's peak of blocks, about the sum of the levels' peaks where
// malloc's is nearer the largest. Hence the policy: only a process that evaluates at most one mp
// precision installs the pools (install_mp_arena_for; `run` does); every other keeps malloc. A
// `run` that diverges still runs its diagnosis's other trend levels (mp128, mp256) on them.
//
// AddressSanitizer builds do not install the pools: there every block (MPFR's scratch, a wide mp
// value's limbs) is malloc's, so ASan reports a use after free or a double free of one, and LSan a
// leaked one, which a pool would hide (a freed block is reused at once and chunks stay reachable).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/scalar.hpp"

namespace shardsim {

inline constexpr std::size_t kMpArenaMaxBlock = 512;
// The size of an Mp value, and how many limbs it holds without a block (mp_backend.hpp).
inline constexpr std::size_t kMpValueBytes = 56;
inline constexpr int kMpInlineLimbs = 5;

#if defined(__SANITIZE_ADDRESS__)  // GCC
inline constexpr bool kMpArenaSanitized = true;
#elif defined(__has_feature)  // Clang
#if __has_feature(address_sanitizer)
inline constexpr bool kMpArenaSanitized = true;
#else
inline constexpr bool kMpArenaSanitized = false;
#endif
#else
inline constexpr bool kMpArenaSanitized = false;
#endif

// Makes the pools GMP's memory functions (nothing in an AddressSanitizer build). Idempotent.
// GMP's mp_set_memory_functions is not thread-safe: call it while no other thread uses GMP. Blocks
// malloc made before are adopted when freed (a block's size alone decides where it goes).
void install_mp_arena();

// The policy (docs/threads-and-memory.md "Multiprecision memory"): the pools when `precisions` and
// `also` (if not null), everything a process will evaluate, hold at most one mp precision; else
// malloc stays, since a process that runs several would keep each one's blocks (above). `run` calls
// it with its precisions and the goldens' reference.
void install_mp_arena_for(const std::vector<Precision>& precisions,
                          const Precision* also = nullptr);
// The policy's test: at most one distinct mp precision among `precisions` and `also`.
bool mp_arena_wanted(const std::vector<Precision>& precisions, const Precision* also = nullptr);

// Whether GMP's memory functions are the pools' now (false in an AddressSanitizer build).
bool mp_arena_installed();

// Bytes taken from malloc for chunks so far, all threads.
std::int64_t mp_arena_chunk_bytes();

}  // namespace shardsim
