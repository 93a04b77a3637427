// Tests for parallel.hpp: every index runs exactly once whatever the thread count, nested loops
// (shared with idle threads) cover everything without deadlocking, the smallest failing index's
// exception is the one rethrown, worker threads compute mp values at the caller's precision, and
// bad thread counts are refused. (That whole runs do not depend on the thread count is the digests
// ctest, run under SHARDSIM_THREADS = 1, 2, 3 and 8: tests/CMakeLists.txt.)
#include "core/parallel.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli_test_support.hpp"
#include "core/error.hpp"
#include "core/mp.hpp"
#include "core/narrow_float.hpp"

using shardsim::InputError;
using shardsim::parallel_for;
using shardsim::parse_thread_count;
using shardsim::set_thread_count;
using shardsim::thread_count;

namespace {

// Restores the thread count a test changed.
struct ThreadCountGuard {
  int saved = thread_count();
  ~ThreadCountGuard() { set_thread_count(saved); }
};

}  // namespace

TEST_CASE("parallel: parallel_for runs every index exactly once for any thread count",
          "[parallel]") {
  const ThreadCountGuard guard;
  for (int threads : {1, 2, 3, 8}) {
    set_thread_count(threads);
    for (std::int64_t n : {0, 1, 2, 7, 1000}) {
      std::vector<int> visits(static_cast<std::size_t>(n), 0);  // each index writes only its own
      parallel_for(n, [&](std::int64_t i) { ++visits[static_cast<std::size_t>(i)]; });
      for (std::int64_t i = 0; i < n; ++i) {
        INFO("threads " << threads << ", n " << n << ", index " << i);
        CHECK(visits[static_cast<std::size_t>(i)] == 1);
      }
    }
  }
}

TEST_CASE("parallel: a parallel_for inside a parallel_for covers everything exactly once",
          "[parallel]") {
  const ThreadCountGuard guard;
  for (int threads : {2, 3, 4}) {
    set_thread_count(threads);
    constexpr std::int64_t kOuter = 6, kInner = 50;
    std::vector<std::int64_t> sums(kOuter, 0);
    parallel_for(kOuter, [&](std::int64_t o) {
      std::vector<std::int64_t> inner(kInner, 0);
      parallel_for(kInner, [&](std::int64_t i) { inner[static_cast<std::size_t>(i)] += i + 1; });
      for (std::int64_t v : inner) sums[static_cast<std::size_t>(o)] += v;
    });
    // 1 + 2 + ... + 50 = 50 * 51 / 2 = 1275 for every outer index (an index run twice or
    // skipped changes it).
    for (std::int64_t s : sums) CHECK(s == 1275);
  }
}

TEST_CASE("parallel: a slow outer index shares its nested loops with the idle threads",
          "[parallel]") {
  // Outer index 0 is trivial and 1 runs 40 nested loops (three levels deep), so once index 0 is
  // done its thread is idle and may join them: every inner index must still run exactly once,
  // at the caller's mp precision, and an inner failure must reach the outer caller as the
  // smallest failing index's.
  const ThreadCountGuard guard;
  const unsigned saved_bits = shardsim::mp_significand_bits();
  shardsim::set_mp_precision(300);
  const long want = static_cast<long>(mpfr_get_prec(shardsim::Mp(1).backend().data()));
  for (int threads : {2, 3, 8}) {
    set_thread_count(threads);
    constexpr std::int64_t kLoops = 40, kInner = 64, kDeep = 3;
    std::vector<int> visits(kLoops * kInner * kDeep, 0);
    std::vector<long> precision(kLoops * kInner, 0);
    parallel_for(2, [&](std::int64_t o) {
      if (o == 0) return;
      for (std::int64_t loop = 0; loop < kLoops; ++loop) {
        parallel_for(kInner, [&](std::int64_t i) {
          const std::int64_t at = loop * kInner + i;
          precision[static_cast<std::size_t>(at)] =
              static_cast<long>(mpfr_get_prec(shardsim::Mp(3).backend().data()));
          parallel_for(kDeep,
                       [&](std::int64_t d) { ++visits[static_cast<std::size_t>(at * kDeep + d)]; });
        });
      }
    });
    INFO("threads " << threads);
    CHECK(std::count(visits.begin(), visits.end(), 1) == static_cast<long>(visits.size()));
    CHECK(std::count(precision.begin(), precision.end(), want) ==
          static_cast<long>(precision.size()));
    try {
      parallel_for(2, [&](std::int64_t o) {
        if (o == 0) return;
        parallel_for(500, [&](std::int64_t i) {
          if (i == 7 || i == 450) throw std::runtime_error("inner " + std::to_string(i));
        });
      });
      FAIL("no exception");
    } catch (const std::runtime_error& e) {
      CHECK(std::string(e.what()) == "inner 7");
    }
  }
  shardsim::set_mp_precision(saved_bits);
}

TEST_CASE("parallel: parallel_for rethrows the exception of the smallest failing index",
          "[parallel]") {
  const ThreadCountGuard guard;
  for (int threads : {1, 3, 8}) {
    set_thread_count(threads);
    std::vector<int> ran(1000, 0);
    try {
      parallel_for(1000, [&](std::int64_t i) {
        ran[static_cast<std::size_t>(i)] = 1;
        if (i == 5 || i == 900) throw std::runtime_error("index " + std::to_string(i));
      });
      FAIL("no exception");
    } catch (const std::runtime_error& e) {
      INFO("threads " << threads);
      CHECK(std::string(e.what()) == "index 5");
    }
    // With more than one thread every index still runs (so which error wins cannot depend on
    // timing); a single thread stops at the first, as a plain loop does.
    if (threads > 1) CHECK(ran[999] == 1);
  }
}

TEST_CASE("parallel: worker threads make mp values at the caller's precision", "[parallel][mp]") {
  const ThreadCountGuard guard;
  set_thread_count(4);
  const unsigned saved_bits = shardsim::mp_significand_bits();
  // Two precisions one after the other: the pool's threads outlive the first job, and must follow
  // the caller to the second (Boost keeps the default precision per thread).
  for (unsigned bits : {300u, 128u}) {
    shardsim::set_mp_precision(bits);
    const long want = static_cast<long>(mpfr_get_prec(shardsim::Mp(1).backend().data()));
    std::vector<long> got(64, 0);
    parallel_for(64, [&](std::int64_t i) {
      got[static_cast<std::size_t>(i)] =
          static_cast<long>(mpfr_get_prec(shardsim::Mp(static_cast<int>(i)).backend().data()));
    });
    for (long g : got) CHECK(g == want);
  }
  shardsim::set_mp_precision(saved_bits);
}

TEST_CASE("parallel: thread counts are whole numbers from 1 to kMaxThreads", "[parallel]") {
  CHECK(parse_thread_count("1", "--threads") == 1);
  CHECK(parse_thread_count("8", "--threads") == 8);
  CHECK(parse_thread_count("1024", "--threads") == shardsim::kMaxThreads);
  for (const char* bad : {"", "0", "-1", "1025", "2.5", "8x", " 8", "abc"}) {
    INFO("'" << bad << "'");
    CHECK_THROWS_WITH(parse_thread_count(bad, "SHARDSIM_THREADS"),
                      Catch::Contains("SHARDSIM_THREADS: invalid thread count"));
  }
}

TEST_CASE("parallel: cli: a bad --threads or SHARDSIM_THREADS exits 2 naming it, writing nothing",
          "[parallel][cli]") {
  using namespace cli_test;
  TempDir dir;
  const std::string scenario = q(source_scenario("layernorm_sequence_sharded.toml"));
  const fs::path report = dir.path() / "r.json";
  const CliResult flag = run_cli("run --quiet " + scenario + " --threads 0 --report " + q(report));
  CHECK(flag.exit_code == 2);
  CHECK(flag.out.empty());
  CHECK(flag.err.find("--threads: invalid thread count '0'") != std::string::npos);
  const CliResult env = run_cli("precision --quiet " + scenario, "SHARDSIM_THREADS=many");
  CHECK(env.exit_code == 2);
  CHECK(env.err.find("SHARDSIM_THREADS: invalid thread count 'many'") != std::string::npos);
  CHECK_FALSE(fs::exists(report));
  // A good flag wins over a bad environment value.
  const CliResult good = run_cli("run --quiet " + scenario + " --threads 3", "SHARDSIM_THREADS=x");
  CHECK(good.exit_code == 0);
}

TEST_CASE("parallel: worker threads round NarrowFloat to the caller's format", "[parallel]") {
  const ThreadCountGuard guard;
  set_thread_count(4);
  parallel_for(8, [](std::int64_t) {});  // the pool's threads exist before the format changes
  // 1 + 2^-9 is exact in f16 (10 fraction bits, ulp 2^-10 at 1) and rounds to 1 in bf16 (7
  // fraction bits, ulp 2^-7 at 1): a worker left at the default format (bf16) would give 1.
  shardsim::set_narrow_float_format(shardsim::NarrowFormat::f16);
  std::vector<float> got(64, 0.0f);
  parallel_for(64, [&](std::int64_t i) {
    got[static_cast<std::size_t>(i)] =
        static_cast<float>(shardsim::NarrowFloat(1.0) + shardsim::NarrowFloat(0x1p-9));
  });
  shardsim::set_narrow_float_format(shardsim::NarrowFormat::bf16);
  for (float g : got) CHECK(g == 1.0f + 0x1p-9f);
}
