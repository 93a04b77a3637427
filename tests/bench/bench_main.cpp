// shardsim_bench: the benchmark harness. Not part of ctest; `--smoke` runs tiny
// sizes, correctness checks only.
// Usage: shardsim_bench [--quick] [--smoke] [--torch SCRIPT] [--shardsim BIN] [--scratch DIR]
//                       [--only N]... [--realistic [--realistic-seq N]]
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "bench.hpp"

namespace bench {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::pair<double, double> interleave(int reps, const std::function<void()>& a,
                                     const std::function<void()>& b) {
  a();
  b();
  std::vector<double> ta, tb;
  for (int i = 0; i < reps; ++i) {
    double t0 = now_s();
    a();
    ta.push_back(now_s() - t0);
    t0 = now_s();
    b();
    tb.push_back(now_s() - t0);
  }
  return {median(ta), median(tb)};
}

bool verdict(int target, const std::string& what, double measured, double goal,
             bool higher_better) {
  const bool met = higher_better ? measured >= goal : measured <= goal;
  std::printf("  target %d %-52s %8.3f  (target %s %.2f)  %s\n", target, what.c_str(), measured,
              higher_better ? ">=" : "<=", goal, met ? "MET" : "MISSED");
  std::fflush(stdout);
  return met;
}

bool TorchServer::start(const std::string& script) {
  int in[2], out[2];
  if (pipe(in) != 0 || pipe(out) != 0) return false;
  pid_ = fork();
  if (pid_ < 0) return false;
  if (pid_ == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    close(in[1]);
    close(out[0]);
    execl("/usr/bin/python3", "python3", script.c_str(), "--serve", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  to_child_ = in[1];
  from_child_ = out[0];
  return time("ping") >= 0;
}

double TorchServer::time(const std::string& request) {
  if (to_child_ < 0) return -1;
  const std::string line = request + "\n";
  if (write(to_child_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) return -1;
  std::string reply;
  char c;
  while (read(from_child_, &c, 1) == 1 && c != '\n') reply += c;
  if (reply.empty()) return -1;
  return std::atof(reply.c_str());
}

TorchServer::~TorchServer() {
  if (to_child_ >= 0) close(to_child_);
  if (from_child_ >= 0) close(from_child_);
  if (pid_ > 0) waitpid(pid_, nullptr, 0);
}

}  // namespace bench

namespace {

// The value of `flag` as a whole number in [lo, hi], or exit 2 with the flag named (a bad value
// must not run nothing, or the wrong target, in silence).
long long whole_number(const std::string& flag, const std::string& text, long long lo,
                       long long hi) {
  long long value = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (error != std::errc() || stop != end || value < lo || value > hi) {
    std::fprintf(stderr, "shardsim_bench: %s: '%s' is not a whole number from %lld to %lld\n",
                 flag.c_str(), text.c_str(), lo, hi);
    std::exit(2);
  }
  return value;
}

// --only's target: 1 to 9, but 8 (the realistic run) has its own flag.
int only_target(const std::string& text) {
  const auto target = static_cast<int>(whole_number("--only", text, 1, 9));
  if (target == 8) {
    std::fprintf(stderr, "shardsim_bench: --only 8: the realistic target runs with --realistic\n");
    std::exit(2);
  }
  return target;
}

}  // namespace

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  bench::Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "shardsim_bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--quick") o.quick = true;
    else if (a == "--smoke") o.smoke = o.quick = true;
    else if (a == "--torch") { o.torch = true; o.torch_script = next(); }
    else if (a == "--shardsim") o.shardsim = next();
    else if (a == "--scratch") o.scratch_dir = next();
    else if (a == "--only") o.only.push_back(only_target(next()));
    else if (a == "--realistic") o.realistic = true;
    else if (a == "--realistic-seq") o.realistic_seq = whole_number(a, next(), 2, 1 << 20);
    else {
      std::fprintf(stderr, "shardsim_bench: unknown option '%s'\n", a.c_str());
      return 2;
    }
  }
  if (o.scratch_dir.empty()) o.scratch_dir = "/tmp";
  auto want = [&](int t) {
    return o.only.empty() || std::find(o.only.begin(), o.only.end(), t) != o.only.end();
  };
  bench::TorchServer torch;
  bench::TorchServer* yard = nullptr;
  if (o.torch && !o.smoke) {
    if (torch.start(o.torch_script)) yard = &torch;
    else std::printf("PyTorch yardstick could not start; falling back to the naive C++ loops\n");
  }
  std::printf("shardsim_bench (%s)\n", o.smoke ? "smoke" : o.quick ? "quick" : "full");
  int failures = 0;  // correctness failures only; missed speed targets are reported, not fatal
  if (o.realistic) {
    failures += bench::target_realistic(o);
    if (failures) std::printf("CORRECTNESS FAILURES: %d\n", failures);
    return failures ? 1 : 0;
  }
  if (want(1)) failures += bench::target_layer_norm(o, yard);
  if (want(2)) failures += bench::target_emulation(o);
  if (want(3)) failures += bench::target_mp(o);
  if (want(4)) failures += bench::target_attention(o, yard);
  if (want(5) && !o.quick) failures += bench::target_scale(o);
  if (want(6) && !o.quick) failures += bench::target_goldens(o);
  if (want(7)) failures += bench::target_qd(o);
  if (want(9) && !o.quick) failures += bench::target_mp_memory(o);
  if (failures) std::printf("CORRECTNESS FAILURES: %d\n", failures);
  return failures ? 1 : 0;
}
