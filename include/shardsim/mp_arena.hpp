// GMP's memory functions (through which MPFR, and so every Mp value, allocates its limbs) served
// from per-thread pools of fixed-size blocks instead of malloc (issue 16: compact multiprecision).
//
// An Mp value is Boost's mpfr_t (32 bytes, inside the tensor) plus one block of limbs: 8 + 8 n
// bytes for n limbs, 48 at mp256's 257 bits. From malloc that block costs 64 bytes (its header
// and rounding) and a malloc/free pair per value made or dropped; from the pools it costs its own
// size rounded up to 8 bytes, and making or dropping a value pushes or pops a free list. Values
// and their bits are untouched: this is allocation only.
//
// The pools (sim/core/mp_arena.cpp): blocks of up to kMpArenaMaxBlock bytes, in size classes of 8
// bytes, carved from 256 KiB chunks that are never returned (a freed block goes on the freeing
// thread's list for its class and is reused by that thread, or through a shared depot by others);
// larger requests go to malloc. GMP passes every block's size to free and realloc, so a block
// needs no header. Chunks stay listed in an immortal registry.
//
// What that costs: a class's memory serves only that class, so a process that runs several mp
// precisions one after another (`precision --levels mp128,mp256,...`, `run --precision
// mp128,mp256`) keeps each one's peak of blocks; its mp memory is about the sum of the levels'
// peaks where malloc's would be nearer the largest.
//
// AddressSanitizer builds do not install the pools: there every mp value keeps its own malloc
// block, so ASan reports a use after free or a double clear of an mp value, and LSan a leaked one,
// which a pool would hide (a freed block is reused at once and chunks stay reachable).
#pragma once

#include <cstddef>
#include <cstdint>

namespace shardsim {

inline constexpr std::size_t kMpArenaMaxBlock = 512;

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
// mp.cpp calls it during static initialization, so every program in which mp.cpp is linked (every
// program that makes mp values: their precision is set there) allocates them from the pools.
// GMP's mp_set_memory_functions is not thread-safe: call it before other threads use GMP. Blocks
// malloc made before are adopted when freed (a block's size alone decides where it goes).
void install_mp_arena();

// Whether GMP's memory functions are the pools' now (false in an AddressSanitizer build).
bool mp_arena_installed();

// Bytes taken from malloc for chunks so far, all threads.
std::int64_t mp_arena_chunk_bytes();

}  // namespace shardsim
