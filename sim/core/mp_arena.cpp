// The pools behind GMP's memory functions (mp_arena.hpp).
//
// Where a block goes is decided by the size GMP passes, never by where it came from: sizes up to
// kMpArenaMaxBlock bytes belong to class (size - 1) / 8, whose blocks are (class + 1) * 8 bytes;
// larger ones are malloc's. GMP's contract (and MPFR's use of it) passes free and realloc the size
// a block was allocated with (MPFR 4.2 and GMP 6.2 pass exactly that, strings included:
// mpfr_free_str's length + 1 is the size mpfr_get_str and mpfr_asprintf allocated), and a smaller
// size would only put a block on a list of smaller blocks. A block malloc made before the pools
// were installed is, by the same rule, adopted by the pools when freed and never returned.
//
// Each thread keeps, per class, a free list and the uncarved end of its current chunk. A list that
// reaches kBatch blocks is handed whole to a shared depot, and a thread whose list and chunk are
// both empty takes a batch from the depot before carving a new chunk: blocks freed on one thread
// (a tensor made by the pool's workers and dropped by the caller) are reused by the others instead
// of piling up where they were freed.
//
// The callbacks are noexcept: GMP and MPFR are C, and nothing may unwind through them; running out
// of memory aborts with a message, as GMP's own allocator does.
#include "core/mp_arena.hpp"

#include <gmp.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

namespace shardsim {
namespace {

constexpr std::size_t kGrain = 8;
constexpr int kClasses = static_cast<int>(kMpArenaMaxBlock / kGrain);
constexpr std::size_t kChunkBytes = std::size_t(256) << 10;
constexpr int kBatch = 1024;

struct FreeBlock {
  FreeBlock* next;
};

struct Batch {
  FreeBlock* head;
  int count;
};

// One thread's pools: constant-initialized and trivially destructible, because GMP frees blocks
// during static destruction too (Boost's MPFR cleanup), after destructible thread-locals are gone.
// A thread that exits hands its lists to the depot (ExitFlush); the rest of its current chunks
// stays unused, and blocks it frees after its ExitFlush ran (a thread-local destroyed later) stay
// on its lists: both are lost to reuse, not to the registry.
struct ThreadPools {
  FreeBlock* free[kClasses];
  int count[kClasses];
  char* next[kClasses];  // the uncarved part of the current chunk: [next, end)
  char* end[kClasses];
};
constinit thread_local ThreadPools t_pools{};

// Never destroyed (see ThreadPools).
struct Registry {
  std::mutex mutex;
  std::vector<void*> chunks;
  std::vector<Batch> depot[kClasses];
  std::atomic<std::int64_t> chunk_bytes{0};
};
Registry& registry() {
  static Registry* const r = new Registry;
  return *r;
}

int class_of(std::size_t size) { return size == 0 ? 0 : static_cast<int>((size - 1) / kGrain); }
std::size_t block_bytes(int c) { return static_cast<std::size_t>(c + 1) * kGrain; }

// GMP's own reaction to an allocation failure: its allocation functions may not return null, and
// may not throw or longjmp through GMP and MPFR (GMP manual, "Custom Allocation").
[[noreturn]] void out_of_memory(std::size_t size) {
  std::fprintf(stderr, "shardsim: error: out of memory allocating %zu bytes for mp values\n", size);
  std::abort();
}

void* checked(void* p, std::size_t size) {
  if (p == nullptr) out_of_memory(size);
  return p;
}

// Appends to one of the registry's vectors, which may need memory.
template <typename V, typename X>
void push(V& vector, X&& x) noexcept {
  try {
    vector.push_back(std::forward<X>(x));
  } catch (...) {
    out_of_memory(sizeof(x));
  }
}

// Hands a finishing thread's free lists to the depot, so that threads that come and go (the
// pool's workers when the thread count changes, a test's threads) leave their blocks to the
// others. Armed when a thread first takes blocks or frees onto an empty list. On the main thread it
// runs at exit, and blocks freed after it (static destruction) go on the lists again, which stay
// valid until the process ends.
struct ExitFlush {
  bool armed = false;
  ~ExitFlush() {
    if (!armed) return;
    ThreadPools& t = t_pools;
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    for (int c = 0; c < kClasses; ++c) {
      if (t.free[c] == nullptr) continue;
      push(r.depot[c], Batch{t.free[c], t.count[c]});
      t.free[c] = nullptr;
      t.count[c] = 0;
    }
  }
};
thread_local ExitFlush t_exit_flush;

// Refills class c of this thread from the depot: a batch of class c, or else one of a larger class
// up to twice its block size (a block serves any request it holds, and when freed joins the class
// of the size it is freed with, so a run at mp128 after one at mp256 reuses the mp256 blocks);
// else it gives the thread a fresh chunk to carve.
void refill(ThreadPools& t, int c) noexcept {
  t_exit_flush.armed = true;
  Registry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    for (int from = c; from < kClasses && from <= 2 * c + 1; ++from) {
      std::vector<Batch>& depot = r.depot[from];
      if (depot.empty()) continue;
      t.free[c] = depot.back().head;
      t.count[c] = depot.back().count;
      depot.pop_back();
      return;
    }
  }
  char* chunk = static_cast<char*>(checked(std::malloc(kChunkBytes), kChunkBytes));
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    push(r.chunks, static_cast<void*>(chunk));
  }
  r.chunk_bytes.fetch_add(static_cast<std::int64_t>(kChunkBytes), std::memory_order_relaxed);
  t.next[c] = chunk;
  t.end[c] = chunk + kChunkBytes;
}

void* allocate(std::size_t size) noexcept {
  if (size > kMpArenaMaxBlock) return checked(std::malloc(size), size);
  const int c = class_of(size);
  ThreadPools& t = t_pools;
  if (t.free[c] == nullptr && static_cast<std::size_t>(t.end[c] - t.next[c]) < block_bytes(c)) {
    refill(t, c);
  }
  void* p = nullptr;
  if (FreeBlock* b = t.free[c]) {
    t.free[c] = b->next;
    --t.count[c];
    p = b;
  } else {
    p = t.next[c];
    t.next[c] += block_bytes(c);
  }
  return p;
}

void release(void* p, std::size_t size) noexcept {
  if (p == nullptr) return;
  if (size > kMpArenaMaxBlock) {
    std::free(p);
    return;
  }
  const int c = class_of(size);
  ThreadPools& t = t_pools;
  if (t.count[c] >= kBatch) {  // hand the full list to the depot
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    push(r.depot[c], Batch{t.free[c], t.count[c]});
    t.free[c] = nullptr;
    t.count[c] = 0;
  }
  if (t.count[c] == 0) t_exit_flush.armed = true;  // a thread that only frees hands over too
  auto* b = static_cast<FreeBlock*>(p);
  b->next = t.free[c];
  t.free[c] = b;
  ++t.count[c];
}

void* reallocate(void* p, std::size_t old_size, std::size_t new_size) noexcept {
  if (p == nullptr) return allocate(new_size);
  if (old_size > kMpArenaMaxBlock && new_size > kMpArenaMaxBlock) {
    return checked(std::realloc(p, new_size), new_size);
  }
  // Shrinking within a class keeps the block (it holds at least old_size bytes); growing always
  // moves, so a block adopted from malloc is never assumed to hold more than it was asked for.
  if (old_size <= kMpArenaMaxBlock && new_size <= old_size &&
      class_of(new_size) == class_of(old_size)) {
    return p;
  }
  void* q = allocate(new_size);
  std::memcpy(q, p, std::min(old_size, new_size));
  release(p, old_size);
  return q;
}

}  // namespace

void install_mp_arena() {
  if constexpr (!kMpArenaSanitized) mp_set_memory_functions(allocate, reallocate, release);
}

void install_mp_arena_for(const std::vector<Precision>& precisions, const Precision* also) {
  if (mp_arena_wanted(precisions, also)) install_mp_arena();
}

bool mp_arena_wanted(const std::vector<Precision>& precisions, const Precision* also) {
  std::vector<unsigned> mp_bits;
  for (const Precision& p : precisions) {
    if (p.kind == ScalarKind::mp) mp_bits.push_back(p.bits);
  }
  if (also && also->kind == ScalarKind::mp) mp_bits.push_back(also->bits);
  std::sort(mp_bits.begin(), mp_bits.end());
  return std::unique(mp_bits.begin(), mp_bits.end()) - mp_bits.begin() <= 1;
}

bool mp_arena_installed() {
  void* (*a)(std::size_t) = nullptr;
  void* (*r)(void*, std::size_t, std::size_t) = nullptr;
  void (*f)(void*, std::size_t) = nullptr;
  mp_get_memory_functions(&a, &r, &f);
  return a == allocate && r == reallocate && f == release;
}

std::int64_t mp_arena_chunk_bytes() {
  return registry().chunk_bytes.load(std::memory_order_relaxed);
}

}  // namespace shardsim
