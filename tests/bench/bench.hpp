// Shared helpers of shardsim_bench (tests/bench/*.cpp; `cmake --build B --target bench`).
// Every figure is a ratio of two measurements taken side by side in one run: the two sides are
// interleaved rep by rep and each side's median is used, so machine noise hits both alike.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "core/parallel.hpp"

namespace bench {

// Sets shardsim's thread count for a scope (parallel.hpp), restoring the previous one after:
// the targets whose yardstick runs on one thread (PyTorch in 1 and 4, raw MPFR loops in 3) run
// shardsim on one thread too.
class ThreadCount {
 public:
  explicit ThreadCount(int threads) : saved_(shardsim::thread_count()) {
    shardsim::set_thread_count(threads);
  }
  ~ThreadCount() { shardsim::set_thread_count(saved_); }
  ThreadCount(const ThreadCount&) = delete;
  ThreadCount& operator=(const ThreadCount&) = delete;

 private:
  int saved_;
};

struct Options {
  bool quick = false;   // reduced sizes and reps (tools/bench --quick)
  bool smoke = false;   // tiny sizes, correctness only (ctest)
  bool torch = false;   // use tools/bench_torch.py as the yardstick where there is one
  std::string torch_script;  // path of bench_torch.py
  std::string shardsim;      // path of the shardsim binary (target 5)
  std::string scratch_dir;   // where target 5/6 write files
  std::vector<int> only;     // targets to run; empty: all
  bool realistic = false;    // run only the realistic target (tools/bench --target realistic)
  std::int64_t realistic_seq = 0;  // its sequence length (0: 2048); smaller for a smoke
};

inline double now_s() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v);

// Runs a() and b() alternately `reps` times (after one warm-up each); returns their medians.
std::pair<double, double> interleave(int reps, const std::function<void()>& a,
                                     const std::function<void()>& b);

// Prints one target line: "MET" or "MISSED (measured X, target OP Y)". Returns met.
bool verdict(int target, const std::string& what, double measured, double goal, bool higher_better);

// A persistent `python3 bench_torch.py --serve` child: send one request line, read one reply.
class TorchServer {
 public:
  bool start(const std::string& script);
  // Returns seconds for one timed call of `request` (e.g. "ln f64 2048 1024"); < 0 on error.
  double time(const std::string& request);
  ~TorchServer();

 private:
  int to_child_ = -1;
  int from_child_ = -1;
  int pid_ = -1;
};

int target_layer_norm(const Options& o, TorchServer* torch);   // 1
int target_emulation(const Options& o);                        // 2
int target_mp(const Options& o);                               // 3
int target_attention(const Options& o, TorchServer* torch);    // 4
int target_scale(const Options& o);                            // 5
int target_goldens(const Options& o);                          // 6
int target_qd(const Options& o);                               // 7
int target_mp_memory(const Options& o);                        // 9
int target_realistic(const Options& o);                        // --target realistic

}  // namespace bench
