// Tests for mp_arena.hpp: once installed, GMP allocates the limbs of mp values wider than 320 bits
// (mp256's are inline, mp_backend.hpp) from the pools, freed blocks are reused (on the thread that
// freed them, and across threads through the depot), and the paths that move a value between block
// sizes (precision changes, strings, blocks above the pooled sizes) keep its value; the policy says
// when a process installs them. That no result moves is the
// digests ctest (every bundled scenario's reports and goldens, mp levels included, hash as before
// the pools).
#include "core/mp_arena.hpp"

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "core/mp.hpp"
#include "core/parallel.hpp"
#include "runner/runner.hpp"
#include "scenario/scenario.hpp"

using shardsim::Mp;
using shardsim::mp_arena_chunk_bytes;

namespace {

struct ThreadCountGuard {
  int saved = shardsim::thread_count();
  ~ThreadCountGuard() { shardsim::set_thread_count(saved); }
};

// n values i / 3 (i < n) at this thread's mp precision.
std::vector<Mp> make_values(int n) {
  std::vector<Mp> values;
  values.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) values.push_back(Mp(i) / 3);
  return values;
}

// Installs the pools for the tests below (the test program, like every program but `run` with one
// mp precision, starts on malloc; installing later adopts malloc's blocks as they are freed). An
// AddressSanitizer build does not install them (mp_arena.hpp): there the tests check that no pool
// memory was ever taken, and the pools are tested by the other builds (Release, ThreadSanitizer).
bool pools_off() {
  shardsim::install_mp_arena();
  if (shardsim::mp_arena_installed()) return false;
  CHECK(shardsim::kMpArenaSanitized);
  CHECK(mp_arena_chunk_bytes() == 0);
  return true;
}

}  // namespace

TEST_CASE("mp arena: GMP's memory functions are the pools' once installed (not under ASan)",
          "[mp_arena]") {
  shardsim::install_mp_arena();
  shardsim::install_mp_arena();  // idempotent
  CHECK(shardsim::mp_arena_installed() == !shardsim::kMpArenaSanitized);
  CHECK(shardsim::kMpArenaMaxBlock == 512);
}

TEST_CASE("mp arena: the pools are for processes that evaluate at most one mp precision",
          "[mp_arena]") {
  using shardsim::mp_arena_wanted;
  using shardsim::parse_precision;
  const shardsim::Precision mp256 = parse_precision("mp256"), mp128 = parse_precision("mp128");
  CHECK(mp_arena_wanted({}));
  CHECK(mp_arena_wanted({parse_precision("f64"), parse_precision("qd")}));
  CHECK(mp_arena_wanted({parse_precision("f32"), mp256}));
  CHECK(mp_arena_wanted({mp256, mp256}, &mp256));  // run --precision mp256 with mp256 goldens
  CHECK_FALSE(mp_arena_wanted({mp128, mp256}));    // a ladder keeps each level's blocks
  CHECK(mp_arena_wanted({parse_precision("f64")}, &mp128));
  CHECK_FALSE(mp_arena_wanted({mp128}, &mp256));  // the goldens' reference is evaluated too
}

TEST_CASE("mp arena: a thread reuses the blocks it freed, so repeated rounds take no new chunks",
          "[mp_arena]") {
  // On a fresh thread (empty lists): round 1 may carve chunks (or take the depot's batches);
  // rounds 2-5 make and drop the same number of values and must be served from the blocks round 1
  // freed. At 600 bits (10 limbs: 80-byte blocks; mp256's limbs are inline and take none).
  if (pools_off()) return;
  std::int64_t after_first = 0, after_last = 0;
  bool values_right = true;
  std::thread worker([&] {
    shardsim::set_mp_precision(600);
    for (int round = 1; round <= 5; ++round) {
      std::vector<Mp> values = make_values(20000);
      for (int i = 0; i < 20000; i += 997) values_right &= values[i] * 3 == Mp(i);
      if (round == 1) after_first = mp_arena_chunk_bytes();
    }
    after_last = mp_arena_chunk_bytes();
  });
  worker.join();
  CHECK(values_right);
  CHECK(after_last == after_first);
}

TEST_CASE("mp arena: values made by the pool's workers and dropped by the caller are reused",
          "[mp_arena]") {
  // Eight rounds: workers make 60000 values in all (80-byte blocks at 600 bits: 4.8 MB a round),
  // the caller drops them all. Without the depot every worker would carve new chunks each round
  // (about 3.2 MB of them for the two workers' share) while the freed blocks piled up on the
  // caller's lists: 22 MB over rounds 2-8. With it the growth after round 1 stays within a few
  // chunks per thread (256 KiB each).
  if (pools_off()) return;
  const ThreadCountGuard guard;
  shardsim::set_thread_count(3);
  shardsim::set_mp_precision(600);
  std::int64_t after_first = 0;
  bool values_right = true;
  for (int round = 1; round <= 8; ++round) {
    std::vector<std::vector<Mp>> parts(6);
    shardsim::parallel_for(6, [&](std::int64_t k) { parts[k] = make_values(10000); });
    for (const std::vector<Mp>& part : parts) values_right &= part[9999] * 3 == Mp(9999);
    parts.clear();
    if (round == 1) after_first = mp_arena_chunk_bytes();
  }
  CHECK(values_right);
  CHECK(mp_arena_chunk_bytes() - after_first <= 6 * (std::int64_t(256) << 10));
  shardsim::set_mp_precision(256);
}

TEST_CASE("mp arena: a thread that ends leaves its free blocks to the threads after it",
          "[mp_arena]") {
  // Twenty threads one after another, each making and dropping 21480 values (20 batches of 1024
  // and 1000 more). Each thread's lists go to the depot when it ends, so from the second thread
  // on every value comes from blocks an earlier thread made: no new chunk. Without that hand-over
  // each thread would take about 1000 blocks with it, and the rest of its chunk, and the later
  // ones would carve new chunks (5 MB more when this was checked).
  // At 1500 bits (24 limbs: 192-byte blocks, a class no other test uses, so that no earlier
  // test's blocks in the depot can stand in for the ones handed over here).
  if (pools_off()) return;
  std::int64_t after_first = 0;
  for (int i = 0; i < 20; ++i) {
    std::thread thread([] {
      shardsim::set_mp_precision(1500);
      const std::vector<Mp> values = make_values(21480);
    });
    thread.join();
    if (i == 0) after_first = mp_arena_chunk_bytes();
  }
  CHECK(mp_arena_chunk_bytes() == after_first);
}

TEST_CASE("mp arena: a thread that only frees values hands its blocks over when it ends",
          "[mp_arena]") {
  // The caller makes 50 x 1000 values at 2000 bits (2001 carried, 32 limbs: 256-byte blocks, a
  // class no other test uses); 50 threads, one after another, each drop 1000 of them and end
  // without ever taking a block. Their lists go to the depot, so the caller's next 50000 values
  // take no new chunk; lost with the threads they would need 13 MB of new chunks.
  if (pools_off()) return;
  shardsim::set_mp_precision(2000);
  std::vector<std::vector<Mp>> parts(50);
  for (std::vector<Mp>& part : parts) part = make_values(1000);
  for (std::vector<Mp>& part : parts) {
    std::thread thread([dropped = std::move(part)]() mutable { dropped.clear(); });
    thread.join();
  }
  const std::int64_t before = mp_arena_chunk_bytes();
  for (std::vector<Mp>& part : parts) part = make_values(1000);
  CHECK(mp_arena_chunk_bytes() == before);
  shardsim::set_mp_precision(256);
}

TEST_CASE("mp arena: a smaller class reuses a larger class's free blocks up to twice its size",
          "[mp_arena]") {
  // One thread makes and drops 20000 values at 700 bits (702 carried, 11 limbs: 88-byte blocks)
  // and ends (its blocks go to the depot); the next makes 19000 at 400 bits (7 limbs: 56-byte
  // blocks, a class whose own depot is empty) from those 88-byte blocks: no new chunk (19000, not
  // 20000: the check's temporaries need a few blocks more). Without the borrowing it would carve
  // 1 MB. (Classes no other test uses; 88 <= 2 x 56.)
  if (pools_off()) return;
  std::thread larger([] {
    shardsim::set_mp_precision(700);
    const std::vector<Mp> values = make_values(20000);
  });
  larger.join();
  const std::int64_t before = mp_arena_chunk_bytes();
  bool values_right = true;
  std::thread smaller([&] {
    shardsim::set_mp_precision(400);
    const std::vector<Mp> values = make_values(19000);
    values_right = values[18999] * 3 == Mp(18999);
  });
  smaller.join();
  CHECK(values_right);
  CHECK(mp_arena_chunk_bytes() == before);
}

TEST_CASE("mp arena: realloc moves a block between classes and to malloc, keeping its bytes",
          "[mp_arena]") {
  // GMP's realloc function as installed: shrinking within a class keeps the block; growing into
  // another class, above the pooled sizes (malloc's) and back moves it and keeps the first bytes.
  if (pools_off()) return;
  void* (*allocate)(std::size_t) = nullptr;
  void* (*reallocate)(void*, std::size_t, std::size_t) = nullptr;
  void (*release)(void*, std::size_t) = nullptr;
  mp_get_memory_functions(&allocate, &reallocate, &release);
  auto* p = static_cast<unsigned char*>(allocate(48));
  for (int i = 0; i < 48; ++i) p[i] = static_cast<unsigned char>(i + 1);
  CHECK(reallocate(p, 48, 41) == p);  // class 5 (41-48 bytes) both
  auto* q = static_cast<unsigned char*>(reallocate(p, 41, 200));
  auto* r = static_cast<unsigned char*>(reallocate(q, 200, 600));
  auto* s = static_cast<unsigned char*>(reallocate(r, 600, 24));
  bool kept = true;
  for (int i = 0; i < 24; ++i) kept &= s[i] == i + 1;
  CHECK(kept);
  release(s, 24);
}

TEST_CASE("mp arena: precision changes, strings and large blocks keep their values", "[mp_arena]") {
  shardsim::set_mp_precision(256);
  const Mp third = Mp(1) / 3;
  // 257 bits: 5 limbs, inline. 1000 bits: 16 limbs, a 128-byte block; 4300 bits: 68 limbs, 544
  // bytes, above kMpArenaMaxBlock (malloc's). Widening (raise_to) moves the limbs into the wider
  // storage and keeps the value exactly; a copy from the 257-bit value takes its precision back
  // (the block freed, the limbs inline again).
  for (mpfr_prec_t bits : {1000, 4300}) {
    Mp x = third;
    x.backend().raise_to(bits);
    CHECK(x.backend().precision_bits() == bits);
    CHECK(mpfr_equal_p(x.backend().data(), third.backend().data()) != 0);
    CHECK(x * 3 != Mp(1));  // 1/3 at 257 bits, times 3 at the wider precision: not 1
    x = third;
    CHECK(x.backend().precision_bits() == third.backend().precision_bits());
    CHECK(x == third);
  }
  // Strings come from the same functions and are freed with their length + 1 (mpfr_free_str; in
  // MPFR 4.2 the size mpfr_get_str allocated): 1/3 to 20 digits is 0.33333333333333333333 x 10^0.
  // Repeated, with values made between them, so that freed string blocks are reused.
  for (int i = 0; i < 1000; ++i) {
    mpfr_exp_t exponent = 0;
    char* text = mpfr_get_str(nullptr, &exponent, 10, 20, third.backend().data(), MPFR_RNDN);
    const Mp filler = third * i;
    CHECK((std::strcmp(text, "33333333333333333333") == 0 && exponent == 0));
    mpfr_free_str(text);
    CHECK(filler == third * i);
  }
}

TEST_CASE("mp arena: the memory estimate counts an mp value as its 56 bytes and its pooled block",
          "[mp_arena]") {
  // Per element, by hand: f64 8 bytes; mp256 (257 bits carried, counted as 5 limbs: inline) 56;
  // mp128 counted as 3 limbs, inline: 56; mp4096 counted as 65 limbs, a 520-byte block, above the
  // pools' 512: malloc's, with its 16-byte header: 56 + 520 + 16 = 592. The element count is the
  // same at every precision, so the estimates stand in these ratios to f64's.
  const auto scenario = shardsim::parse_scenario(R"toml(name = "estimate"
seed = 1
[mesh]
ranks = 2
[[tensors]]
name = "x"
axes = ["seq", "hidden"]
shape = [4, 8]
init = { dist = "normal", mean = 0.0, std = 1.0 }
placement = "Shard(seq)"
[[steps]]
op = "layer_norm"
input = "x"
output = "y"
axis = "hidden"
)toml",
                                                 "estimate.toml");
  const auto estimate = [&](const char* precision) {
    return shardsim::estimate_memory_bytes(scenario, shardsim::parse_precision(precision));
  };
  const std::uint64_t f64 = estimate("f64");
  REQUIRE(f64 > 0);
  CHECK(estimate("mp256") == 7 * f64);
  CHECK(estimate("mp128") == 7 * f64);
  CHECK(estimate("mp4096") == 74 * f64);
}
