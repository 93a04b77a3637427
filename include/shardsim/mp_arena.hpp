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
// thread's list for its class and is reused by that thread); larger requests go to malloc. GMP
// passes every block's size to free and realloc, so a block needs no header. Chunks stay listed
// in an immortal registry, so leak checkers see them reachable. Under AddressSanitizer every
// free block and uncarved byte is poisoned, so a use after free of an mp value is still caught.
#pragma once

#include <cstddef>
#include <cstdint>

namespace shardsim {

inline constexpr std::size_t kMpArenaMaxBlock = 512;

// Makes the pools GMP's memory functions. Idempotent; the core library calls it during static
// initialization (mp_arena.cpp), so every program that links it allocates mp values from the
// pools. Safe at any moment, even after blocks were made by malloc: a block's size alone decides
// where it goes when freed (see the .cpp).
void install_mp_arena();

// Whether GMP's memory functions are the pools' now.
bool mp_arena_installed();

// Bytes taken from malloc for chunks so far, all threads.
std::int64_t mp_arena_chunk_bytes();

}  // namespace shardsim
