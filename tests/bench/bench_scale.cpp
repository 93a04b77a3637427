// Targets 4 (attention, not measured yet), 5 (scale: peak RSS of a real run) and 6 (goldens).
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "bench.hpp"
#include "shardsim/golden.hpp"
#include "shardsim/io.hpp"

namespace bench {

int target_attention(const Options& o, TorchServer*) {
  (void)o;
  std::printf("Target 4: CP all-gather sliding-window attention\n");
  std::printf("  target 4 NOT MEASURED: the attention benchmark is not implemented yet "
              "(see README, Benchmarks)\n");
  return 0;
}

namespace {

double mem_available_gib() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib / (1024.0 * 1024.0);
  }
  return 0;
}

}  // namespace

int target_scale(const Options& o) {
  std::printf("Target 5: LayerNorm fwd+bwd, batch 1, seq 32768, hidden 4096, 8 ranks, f32\n");
  const double avail = mem_available_gib();
  if (avail < 10.0) {
    std::printf("  SKIPPED: %.1f GiB available, needs 10 GiB\n", avail);
    return 0;
  }
  if (o.shardsim.empty()) {
    std::printf("  SKIPPED: no --shardsim binary given\n");
    return 0;
  }
  const std::int64_t seq = 32768, hidden = 4096;
  const std::string path = o.scratch_dir + "/bench_scale.toml";
  {
    // One training step (forward + backward + SGD) of LayerNorm into an MSE loss (no padding).
    auto tensor = [&](const char* name, const char* role, const char* init) {
      std::ostringstream t;
      t << "[[tensors]]\nname = \"" << name << "\"\n" << role
        << "axes = [\"batch\", \"seq\", \"hidden\"]\nshape = [1, " << seq << ", " << hidden
        << "]\ninit = " << init << "\nplacement = \"Shard(seq)\"\n\n";
      return t.str();
    };
    std::ofstream f(path);
    f << "name = \"bench_scale\"\nseed = 1\nprecisions = [\"f32\"]\ntrain_steps = 1\n"
      << "learning_rate = 0.1\n\n[mesh]\nranks = 8\n\n"
      << tensor("x", "", "{ dist = \"normal\", mean = 0.0, std = 1.0 }")
      << tensor("target", "role = \"target\"\n", "{ dist = \"uniform\", low = -1.0, high = 1.0 }")
      << "[[tensors]]\nname = \"ln.weight\"\nrole = \"parameter\"\naxes = [\"hidden\"]\nshape = ["
      << hidden << "]\ninit = { dist = \"uniform\", low = 0.5, high = 1.5 }\n"
      << "placement = \"Replicate\"\n\n"
      << "[[tensors]]\nname = \"ln.bias\"\nrole = \"parameter\"\naxes = [\"hidden\"]\nshape = ["
      << hidden << "]\ninit = { dist = \"uniform\", low = -0.25, high = 0.25 }\n"
      << "placement = \"Replicate\"\n\n"
      << "[[steps]]\nop = \"layer_norm\"\ninput = \"x\"\nweight = \"ln.weight\"\n"
      << "bias = \"ln.bias\"\noutput = \"y\"\neps = 1e-5\n\n"
      << "[[steps]]\nop = \"mse_loss\"\ninput = \"y\"\ntarget = \"target\"\noutput = \"loss\"\n\n"
      << "[expect]\nverdict = \"pass\"\n";
  }
  std::fflush(stdout);
  const double t0 = now_s();
  const pid_t pid = fork();
  if (pid == 0) {
    // The child prints its own "resources" line: peak RSS and per-rank activation bytes.
    execl(o.shardsim.c_str(), "shardsim", "run", "--quiet", "--resources", path.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  struct rusage usage {};
  wait4(pid, &status, 0, &usage);
  const double wall = now_s() - t0;
  const double peak = double(usage.ru_maxrss) * 1024.0;  // KiB -> bytes
  // The tensors the scenario holds: x, target, y, grad(y), grad(x) (f32), plus the tiny
  // parameters and their gradients.
  const double tensor_bytes = double(seq) * double(hidden) * 4.0;
  const double held = 5.0 * tensor_bytes + 4.0 * double(hidden) * 4.0;
  std::printf("  run exit %d in %.1f s; peak RSS %.2f GiB; scenario tensors %.2f GiB "
              "(x, target, y, grad(y), grad(x), parameters and their gradients)\n",
              WIFEXITED(status) ? WEXITSTATUS(status) : -1, wall, peak / (1 << 30),
              held / (1 << 30));
  verdict(5, "peak RSS / scenario tensor bytes", peak / held, 2.0, false);
  unlink(path.c_str());
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

int target_goldens(const Options& o) {
  std::printf("Target 6: golden writing, 1 GiB safetensors set\n");
  const double avail = mem_available_gib();
  if (avail < 4.0) {
    std::printf("  SKIPPED: %.1f GiB available, needs 4 GiB\n", avail);
    return 0;
  }
  // 8 f32 tensors of 128 MiB, encoded once (encoding is measured separately from the write).
  std::vector<shardsim::RawTensor> tensors;
  for (int t = 0; t < 8; ++t) {
    shardsim::RawTensor r;
    r.name = "t" + std::to_string(t);
    r.dtype = shardsim::format::Dtype::f32;
    r.shape = {32 << 20};
    r.bytes.assign(std::size_t{128} << 20, static_cast<char>(t + 1));
    tensors.push_back(std::move(r));
  }
  double t0 = now_s();
  shardsim::GoldenSet set;
  set.safetensors = shardsim::encode_safetensors(tensors, {});
  tensors.clear();
  set.manifest = "{}\n";
  const double encode_s = now_s() - t0;
  const double bytes = double(set.safetensors.size());
  const std::string dir = o.scratch_dir + "/bench_goldens";
  shardsim::prepare_golden_dir(dir);
  const std::string raw_path = o.scratch_dir + "/bench_raw.bin";
  std::vector<double> tg, tr;
  for (int i = 0; i < 3; ++i) {
    t0 = now_s();
    shardsim::write_goldens(dir, set, {});
    tg.push_back(now_s() - t0);
    t0 = now_s();
    shardsim::write_file_atomically(raw_path, set.safetensors);
    tr.push_back(now_s() - t0);
  }
  const double g = median(tg), r = median(tr);
  std::printf("  encode %.0f MB/s; write_goldens %.0f MB/s; raw write_file_atomically %.0f MB/s\n",
              bytes / encode_s * 1e-6, bytes / g * 1e-6, bytes / r * 1e-6);
  verdict(6, "write_goldens MB/s", bytes / g * 1e-6, 500, true);
  std::printf("    (write_goldens / raw atomic write of the same bytes: %.2f)\n", r / g);
  std::system(("rm -rf '" + dir + "' '" + raw_path + "'").c_str());
  return 0;
}

}  // namespace bench
