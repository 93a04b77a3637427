// Targets 7 (qd against mp256 on the attention benchmark), 9 (the peak RSS of an mp256 LayerNorm)
// and "realistic" (tools/bench --target realistic: a sliding-window attention layer of realistic
// size, goldens from a qd reference). Each runs the shardsim binary on a generated scenario, so
// they measure what a user runs: the dense oracle, the sharded plan and the comparator (and, for
// realistic, the goldens).
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bench.hpp"

namespace bench {

namespace {

struct AttentionCase {
  std::int64_t seq, window, heads, dim, hidden;
  int ranks;
  const char* cp_mode;
  bool train;  // forward + backward (one SGD step on an MSE loss), or forward only
};

std::string tensor_text(const char* name, const char* role, const std::string& axes,
                        const std::string& shape, const char* init, const char* placement) {
  std::ostringstream t;
  t << "[[tensors]]\nname = \"" << name << "\"\n" << role << "axes = " << axes
    << "\nshape = " << shape << "\ninit = " << init << "\n" << placement << "\n";
  return t.str();
}

// A sliding-window attention layer with x[1, seq, hidden] Shard(seq) over `ranks`.
std::string attention_scenario(const AttentionCase& c) {
  const std::string h = std::to_string(c.hidden), n = std::to_string(c.heads),
                    d = std::to_string(c.dim), s = std::to_string(c.seq);
  const std::string in_axes = "[\"hidden\", \"head\", \"head_dim\"]";
  const std::string in_shape = "[" + h + ", " + n + ", " + d + "]";
  const char* w = "{ dist = \"uniform\", low = -0.05, high = 0.05 }";
  std::ostringstream f;
  f << "name = \"bench_attention\"\nseed = 7\nprecisions = [\"f64\"]\n";
  if (c.train) f << "train_steps = 1\nlearning_rate = 0.1\n";
  f << "\n[mesh]\nranks = " << c.ranks << "\n\n"
    << tensor_text("x", "", "[\"batch\", \"seq\", \"hidden\"]", "[1, " + s + ", " + h + "]",
                   "{ dist = \"normal\", mean = 0.0, std = 1.0 }", "placement = \"Shard(seq)\"");
  if (c.train) {
    f << tensor_text("target", "role = \"target\"\n", "[\"batch\", \"seq\", \"hidden\"]",
                     "[1, " + s + ", " + h + "]",
                     "{ dist = \"uniform\", low = -1.0, high = 1.0 }",
                     "placement = \"Shard(seq)\"");
  }
  for (const char* name : {"wq", "wk", "wv"}) {
    f << tensor_text(name, "role = \"parameter\"\n", in_axes, in_shape, w, "");
  }
  f << tensor_text("wo", "role = \"parameter\"\n", "[\"head\", \"head_dim\", \"hidden\"]",
                   "[" + n + ", " + d + ", " + h + "]", w, "");
  f << "[[steps]]\nop = \"sliding_window_attention\"\ninput = \"x\"\nwq = \"wq\"\nwk = \"wk\"\n"
    << "wv = \"wv\"\nwo = \"wo\"\noutput = \"y\"\nn_head = " << c.heads << "\nhead_dim = " << c.dim
    << "\nwindow = " << c.window << "\nrope_theta = 10000.0\nrope = \"rotate_half\"\ncp_mode = \""
    << c.cp_mode << "\"\n\n";
  if (c.train) {
    f << "[[steps]]\nop = \"mse_loss\"\ninput = \"y\"\ntarget = \"target\"\noutput = \"loss\"\n\n";
  }
  f << "[expect]\nverdict = \"pass\"\n";
  return f.str();
}

struct RunResult {
  int exit_code = -1;
  double wall_s = 0;
  double peak_rss_bytes = 0;
};

// Runs the shardsim binary with `args` (stdout and stderr to /dev/null unless `show`).
RunResult run_shardsim(const Options& o, const std::vector<std::string>& args, bool show = false) {
  std::fflush(stdout);
  const double t0 = now_s();
  const pid_t pid = fork();
  if (pid == 0) {
    if (!show) {
      std::FILE* null = std::freopen("/dev/null", "w", stdout);
      (void)null;
    }
    std::vector<char*> argv{const_cast<char*>("shardsim")};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(o.shardsim.c_str(), argv.data());
    _exit(127);
  }
  int status = 0;
  struct rusage usage {};
  wait4(pid, &status, 0, &usage);
  RunResult r;
  r.wall_s = now_s() - t0;
  r.peak_rss_bytes = double(usage.ru_maxrss) * 1024.0;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string write_scenario(const Options& o, const std::string& name, const AttentionCase& c) {
  const std::string path = o.scratch_dir + "/" + name + ".toml";
  std::ofstream(path) << attention_scenario(c);
  return path;
}

}  // namespace

int target_qd(const Options& o) {
  // The attention benchmark of the issue (4 heads x 64, window 128, hidden 256, forward only), at
  // a sequence short enough for mp256 to finish in seconds; cp 2, all-gather.
  const std::int64_t seq = o.smoke ? 16 : o.quick ? 64 : 128;
  std::printf("Target 7: qd vs mp256, sliding-window attention forward, seq %lld, 4 heads x 64, "
              "window 128, hidden 256, cp 2\n", (long long)seq);
  if (o.shardsim.empty()) {
    std::printf("  SKIPPED: no --shardsim binary given\n");
    return 0;
  }
  const AttentionCase c{seq, 128, 4, 64, 256, 2, "allgather", false};
  const std::string path = write_scenario(o, "bench_qd", c);
  int failures = 0;
  std::vector<double> qd, mp;
  const int reps = o.smoke ? 1 : 3;
  for (int i = 0; i < reps; ++i) {
    const RunResult a = run_shardsim(o, {"run", "--quiet", path, "--precision", "qd"});
    const RunResult b = run_shardsim(o, {"run", "--quiet", path, "--precision", "mp256"});
    if (a.exit_code != 0 || b.exit_code != 0) {
      std::printf("  run failed: qd exit %d, mp256 exit %d\n", a.exit_code, b.exit_code);
      ++failures;
      break;
    }
    qd.push_back(a.wall_s);
    mp.push_back(b.wall_s);
  }
  if (!failures) {
    const double q = median(qd), m = median(mp);
    std::printf("  qd %.2f s, mp256 %.2f s (whole runs: oracle + sharded + comparison)\n", q, m);
    if (!o.smoke) verdict(7, "mp256 time / qd time (attention)", m / q, 8.0, true);
  }
  unlink(path.c_str());
  return failures;
}

int target_realistic(const Options& o) {
  // seq 2048 by default; --realistic-seq scales it down for a smoke of the script.
  const std::int64_t seq = o.realistic_seq > 0 ? o.realistic_seq : 2048;
  const std::int64_t window = std::min<std::int64_t>(512, seq / 2);
  std::printf("Target realistic: sliding-window attention, seq %lld, window %lld, 8 heads x 64, "
              "hidden 512, cp 4 ring, forward + backward, goldens F64 + F32 from --reference qd, "
              "all threads\n", (long long)seq, (long long)window);
  if (o.shardsim.empty()) {
    std::printf("  SKIPPED: no --shardsim binary given\n");
    return 0;
  }
  // The half-length run first: the two give the scaling exponent for the projection.
  std::vector<RunResult> runs;
  for (const std::int64_t s : {seq / 2, seq}) {
    const AttentionCase c{s, window, 8, 64, 512, 4, "ring", true};
    const std::string path = write_scenario(o, "bench_realistic", c);
    const std::string dir = o.scratch_dir + "/bench_realistic_goldens";
    std::system(("rm -rf '" + dir + "'").c_str());
    const RunResult r = run_shardsim(o, {"run", "--quiet", path, "--precision", "qd",
                                         "--golden", dir, "--reference", "qd", "--dtype", "both"});
    std::printf("  seq %lld: exit %d, %.1f s, peak RSS %.2f GiB\n", (long long)s, r.exit_code,
                r.wall_s, r.peak_rss_bytes / double(1 << 30));
    std::system(("rm -rf '" + dir + "'").c_str());
    unlink(path.c_str());
    if (r.exit_code != 0) return 1;
    runs.push_back(r);
  }
  // t(seq) ~ seq^k with k from the two runs; with the window fixed the work is linear in seq
  // (k near 1) once seq passes the window.
  const double k = std::log(runs[1].wall_s / runs[0].wall_s) / std::log(2.0);
  const double projected = runs[1].wall_s * std::pow(8192.0 / double(seq), k);
  std::printf("  scaling exponent %.2f; projected seq 8192: %.0f s (%.1f min)\n", k, projected,
              projected / 60);
  if (seq == 2048) {
    verdict(8, "realistic time (minutes)", runs[1].wall_s / 60, 15.0, false);
    verdict(8, "realistic peak RSS (GiB)", runs[1].peak_rss_bytes / double(1 << 30), 8.0, false);
  }
  return 0;
}

int target_mp_memory(const Options& o) {
  // Issue 16's compact-multiprecision case: LayerNorm over x [8, 512, 1024] Shard(seq) on 8
  // ranks, forward only, one thread, at mp256 and (for scale) at f64.
  std::printf(
      "Target 9: peak RSS of an mp256 LayerNorm, x [8, 512, 1024] Shard(seq) on 8 ranks, "
      "forward, one thread\n");
  if (o.shardsim.empty()) {
    std::printf("  SKIPPED: no --shardsim binary given\n");
    return 0;
  }
  const std::string path = o.scratch_dir + "/bench_mp_memory.toml";
  std::ofstream(path)
      << "name = \"bench_mp_memory\"\nseed = 3\nprecisions = [\"f64\"]\n\n[mesh]\nranks = 8\n\n"
      << tensor_text("x", "", "[\"batch\", \"seq\", \"hidden\"]", "[8, 512, 1024]",
                     "{ dist = \"normal\", mean = 0.0, std = 1.0 }", "placement = \"Shard(seq)\"")
      << tensor_text("ln.weight", "role = \"parameter\"\n", "[\"hidden\"]", "[1024]",
                     "{ dist = \"uniform\", low = 0.5, high = 1.5 }", "")
      << tensor_text("ln.bias", "role = \"parameter\"\n", "[\"hidden\"]", "[1024]",
                     "{ dist = \"uniform\", low = -0.25, high = 0.25 }", "")
      << "[[steps]]\nop = \"layer_norm\"\ninput = \"x\"\nweight = \"ln.weight\"\n"
      << "bias = \"ln.bias\"\noutput = \"y\"\neps = 1e-5\n\n[expect]\nverdict = \"pass\"\n";
  const double elements = 8.0 * 512 * 1024;
  RunResult runs[2];
  const char* precisions[2] = {"f64", "mp256"};
  for (int i = 0; i < 2; ++i) {
    runs[i] =
        run_shardsim(o, {"run", "--quiet", path, "--precision", precisions[i], "--threads", "1"});
    std::printf("  %s: exit %d, %.1f s, peak RSS %.0f MB (%.0f bytes per element of x)\n",
                precisions[i], runs[i].exit_code, runs[i].wall_s, runs[i].peak_rss_bytes * 1e-6,
                runs[i].peak_rss_bytes / elements);
  }
  unlink(path.c_str());
  if (runs[0].exit_code != 0 || runs[1].exit_code != 0) return 1;
  verdict(9, "mp256 LayerNorm peak RSS (MB)", runs[1].peak_rss_bytes * 1e-6, 600, false);
  return 0;
}

}  // namespace bench
