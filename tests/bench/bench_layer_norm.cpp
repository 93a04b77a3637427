// Targets 1 (dense LayerNorm fwd+bwd vs PyTorch CPU or a naive loop, and bf16 storage vs
// shardsim's own f32) and 2 (emulation overhead).
#include <cmath>
#include <cstdio>
#include <cstring>

#include "bench.hpp"
#include "core/lane_isa.hpp"
#include "core/rng.hpp"
#include "core/storage.hpp"
#include "core/trace.hpp"
#include "core/world.hpp"
#include "ops/layer_norm/layer_norm-inl.hpp"
#include "ops/layer_norm/layer_norm_plan.hpp"

namespace bench {
namespace {

using shardsim::Axis;
using shardsim::LayerNormParams;
using shardsim::LayerNormSaved;
using shardsim::Shape;
using shardsim::Tensor;

// Deterministic inputs in [-2, 2) from a 64-bit LCG (no dependence on the library's RNG).
template <typename T>
void fill(Tensor<T>& t, std::uint64_t seed, double scale = 2.0, double offset = 0.0) {
  std::uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (std::int64_t i = 0; i < t.shape().numel(); ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const double u = static_cast<double>(s >> 11) * (1.0 / 9007199254740992.0);
    t[i] = T(offset + scale * (2.0 * u - 1.0));
  }
}

// The yardstick of the targets: a naive scalar loop with sequential sums (rows contiguous).
template <typename T>
void naive_forward_backward(const T* x, const T* w, const T* b, const T* dy, T* y, T* dx, T* dw,
                            T* db, T* mean, T* rstd, std::int64_t rows, std::int64_t h, T eps) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * h;
    T sum = 0;
    for (std::int64_t i = 0; i < h; ++i) sum += xr[i];
    const T m = sum / T(h);
    T sq = 0;
    for (std::int64_t i = 0; i < h; ++i) sq += (xr[i] - m) * (xr[i] - m);
    const T rs = T(1) / std::sqrt(sq / T(h) + eps);
    for (std::int64_t i = 0; i < h; ++i) y[r * h + i] = ((xr[i] - m) * rs) * w[i] + b[i];
    mean[r] = m;
    rstd[r] = rs;
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * h;
    const T* dyr = dy + r * h;
    T s = 0, sn = 0;
    for (std::int64_t i = 0; i < h; ++i) {
      const T n = (xr[i] - mean[r]) * rstd[r];
      s += dyr[i] * w[i];
      sn += dyr[i] * w[i] * n;
    }
    s /= T(h);
    sn /= T(h);
    for (std::int64_t i = 0; i < h; ++i) {
      const T n = (xr[i] - mean[r]) * rstd[r];
      db[i] += dyr[i];
      dw[i] += dyr[i] * n;
      dx[r * h + i] = ((dyr[i] * w[i] - s) - n * sn) * rstd[r];
    }
  }
}

template <typename T>
struct LnCase {
  Tensor<T> x, w, b, dy, y, dx, dw, db;
  LayerNormSaved<T> saved;
  LayerNormParams params;
  LnCase(std::int64_t rows, std::int64_t h)
      : x(Shape(std::vector<Axis>{{"seq", rows}, {"hidden", h}})),
        w(Shape(std::vector<Axis>{{"hidden", h}})),
        b(Shape(std::vector<Axis>{{"hidden", h}})),
        dy(Shape(std::vector<Axis>{{"seq", rows}, {"hidden", h}})),
        dw(Shape(std::vector<Axis>{{"hidden", h}})),
        db(Shape(std::vector<Axis>{{"hidden", h}})) {
    fill(x, 1, 2.0, 0.25);
    fill(w, 2, 0.5, 1.0);
    fill(b, 3, 0.25);
    fill(dy, 4, 1.0);
  }
  void run() {
    shardsim::layer_norm_forward(x, &w, &b, params, y, saved);
    shardsim::layer_norm_backward(dy, x, &w, saved, params, dx, &dw, &db);
  }
};

template <typename T>
int one_dtype(const Options& o, TorchServer* torch, const char* dtype, double goal) {
  const std::int64_t rows = o.smoke ? 37 : o.quick ? 512 : 2048;
  const std::int64_t h = o.smoke ? 67 : 1024;
  const int reps = o.smoke ? 1 : o.quick ? 5 : 15;
  LnCase<T> c(rows, h);
  std::vector<T> y(rows * h), dx(rows * h), dw(h), db(h), mean(rows), rstd(rows);
  const T eps = T(c.params.eps);
  auto naive = [&] {
    naive_forward_backward(c.x.data(), c.w.data(), c.b.data(), c.dy.data(), y.data(), dx.data(),
                           dw.data(), db.data(), mean.data(), rstd.data(), rows, h, eps);
  };
  // Correctness: the lane order and the sequential order agree to a few ulps of the row sums;
  // 1e-4 (f32) / 1e-12 (f64) relative to max|value| is ~1000 ulps, far above reordering noise
  // for rows of <= 1024 terms and far below any formula error.
  c.run();
  std::fill(dw.begin(), dw.end(), T(0));
  std::fill(db.begin(), db.end(), T(0));
  naive();
  double err = 0, scale = 0;
  for (std::int64_t i = 0; i < rows * h; ++i) {
    err = std::max({err, std::abs(double(c.y[i] - y[i])), std::abs(double(c.dx[i] - dx[i]))});
    scale = std::max({scale, std::abs(double(y[i])), std::abs(double(dx[i]))});
  }
  const double tol = sizeof(T) == 4 ? 1e-4 : 1e-12;
  int failures = 0;
  if (!(err <= tol * scale)) {
    std::printf("  [%s] kernel disagrees with the naive loop: max err %.3g (scale %.3g)\n", dtype,
                err, scale);
    ++failures;
  }
  // The SSE2 and the AVX2 copies of the lane kernels must give the same bits (lane_isa.hpp).
  if (shardsim::cpu_has_avx2()) {
    const shardsim::LaneIsa detected = shardsim::lane_isa();
    std::vector<std::vector<T>> outputs[2];
    for (const shardsim::LaneIsa isa : {shardsim::LaneIsa::sse2, shardsim::LaneIsa::avx2}) {
      shardsim::set_lane_isa(isa);
      std::fill(c.dw.data(), c.dw.data() + h, T(0));
      std::fill(c.db.data(), c.db.data() + h, T(0));
      c.run();
      outputs[isa == shardsim::LaneIsa::avx2] = {c.y.values(), c.dx.values(), c.dw.values(),
                                                 c.db.values()};
    }
    shardsim::set_lane_isa(detected);
    if (outputs[0] != outputs[1]) {
      std::printf("  [%s] the SSE2 and AVX2 lane kernels differ\n", dtype);
      ++failures;
    }
  }
  if (o.smoke) return failures;
  const double elems = double(rows) * double(h);
  double kernel_s = 0, yard_s = 0;
  const char* yard_name = "naive scalar loop";
  if (torch) {
    yard_name = "PyTorch CPU (1 thread)";
    const std::string req =
        std::string("ln ") + dtype + " " + std::to_string(rows) + " " + std::to_string(h);
    // The server times the call itself (no pipe latency); the two sides alternate rep by rep.
    torch->time(req);
    std::vector<double> tk, tt;
    for (int i = 0; i < reps; ++i) {
      double t0 = now_s();
      c.run();
      tk.push_back(now_s() - t0);
      tt.push_back(torch->time(req));
    }
    kernel_s = median(tk);
    yard_s = median(tt);
  } else {
    std::tie(kernel_s, yard_s) = interleave(
        reps, [&] { c.run(); }, naive);
  }
  std::printf("  [%s %lldx%lld fwd+bwd] shardsim %.3f G elem/s, %s %.3f G elem/s\n", dtype,
              (long long)rows, (long long)h, elems / kernel_s * 1e-9, yard_name,
              elems / yard_s * 1e-9);
  verdict(1, std::string(dtype) + " LayerNorm fwd+bwd / " + (torch ? "torch" : "naive loop"),
          yard_s / kernel_s, goal, true);
  if (!torch) std::printf("    (torch absent: the yardstick is the naive loop, not PyTorch)\n");
  return failures;
}

// bf16 storage (storage.hpp): the f32 kernels on bf16 inputs, with the stored outputs y, dx, dw
// and db rounded to bf16 as a bf16 run stores them (mean and rstd stay f32): y and dx by the
// kernels as they write each block of rows (LayerNormParams::store, what the run's LayerNorm
// step asks for), dw and db, which accumulate over calls, after the backward. Against the same
// f32 pass without rounding: the ratio f32 time / bf16 time says what the rounding costs.
int bf16_ratio(const Options& o) {
  const std::int64_t rows = o.smoke ? 37 : o.quick ? 512 : 2048;
  const std::int64_t h = o.smoke ? 67 : 1024;
  const int reps = o.smoke ? 1 : o.quick ? 5 : 15;
  LnCase<float> c(rows, h);
  for (Tensor<float>* input : {&c.x, &c.w, &c.b, &c.dy}) {
    shardsim::round_to_narrow(shardsim::NarrowFormat::bf16, input->data(), input->numel());
  }
  shardsim::LayerNormParams stored = c.params;
  stored.store = shardsim::NarrowFormat::bf16;
  auto bf16_run = [&] {
    const auto round = [](Tensor<float>& output) {
      shardsim::round_to_narrow(shardsim::NarrowFormat::bf16, output.data(), output.numel());
    };
    shardsim::layer_norm_forward(c.x, &c.w, &c.b, stored, c.y, c.saved);
    shardsim::layer_norm_backward(c.dy, c.x, &c.w, c.saved, stored, c.dx, &c.dw, &c.db);
    for (Tensor<float>* output : {&c.dw, &c.db}) round(*output);
  };
  // Correctness: the stored y and dx are bf16 values, each the conversion of narrow.hpp
  // (exhaustively tested) applied to the f32 pass's value.
  c.run();
  const std::vector<float> y32 = c.y.values(), dx32 = c.dx.values();
  bf16_run();
  int failures = 0;
  for (std::int64_t i = 0; i < rows * h; ++i) {
    const auto reference = [](float v) {
      return shardsim::narrow_to_float(
          shardsim::NarrowFormat::bf16,
          shardsim::narrow_from_float(shardsim::NarrowFormat::bf16, v));
    };
    if (c.y[i] != reference(y32[static_cast<std::size_t>(i)]) ||
        c.dx[i] != reference(dx32[static_cast<std::size_t>(i)])) {
      std::printf("  [bf16] element %lld is not the bf16 rounding of the f32 pass\n", (long long)i);
      ++failures;
      break;
    }
  }
  if (o.smoke) return failures;
  const auto [f32_s, bf16_s] = interleave(
      reps, [&] { c.run(); }, bf16_run);
  std::printf("  [bf16 %lldx%lld fwd+bwd] f32 pass %.2f ms, bf16 storage %.2f ms\n",
              (long long)rows, (long long)h, f32_s * 1e3, bf16_s * 1e3);
  verdict(1, "bf16 LayerNorm fwd+bwd / shardsim f32", f32_s / bf16_s, 0.8, true);
  return failures;
}

}  // namespace

int target_layer_norm(const Options& o, TorchServer* torch) {
  const ThreadCount one_thread(1);  // PyTorch's side and the naive loop run on one thread
  std::printf("Target 1: dense LayerNorm forward+backward, single thread (lane kernels: %s)\n",
              shardsim::lane_isa() == shardsim::LaneIsa::avx2 ? "AVX2" : "SSE2");
  int f = one_dtype<double>(o, torch, "f64", 1.2);
  f += one_dtype<float>(o, torch, "f32", 1.0);
  f += bf16_ratio(o);
  return f;
}

int target_emulation(const Options& o) {
  std::printf("Target 2: sequence-sharded LayerNorm over 8 ranks vs dense, trace on (f32)\n");
  const std::int64_t rows = o.smoke ? 37 : o.quick ? 512 : 2048;
  const std::int64_t h = o.smoke ? 67 : 1024;
  const int reps = o.smoke ? 1 : o.quick ? 5 : 15;
  LnCase<float> c(rows, h);
  shardsim::World<float> world(8, shardsim::ReduceOrder::rank, shardsim::Schedule{});
  std::vector<shardsim::TraceEntry> trace;
  world.set_hook([&](const shardsim::BoundaryLabel& label, const shardsim::DistTensor<float>& t) {
    shardsim::TraceEntry e;
    e.id = static_cast<int>(trace.size());
    e.op = label.op;
    e.tensor = label.tensor;
    e.dense = label.dense;
    e.exact = label.exact;
    e.global = t.global;
    e.layout = t.layout;
    trace.push_back(std::move(e));
    return true;
  });
  const auto seq = shardsim::Placement::shard("seq");
  const auto rep = shardsim::Placement::replicate();
  const auto sx = shardsim::distribute<float>("x", c.x, seq, 8);
  const auto sw = shardsim::distribute<float>("w", c.w, rep, 8);
  const auto sb = shardsim::distribute<float>("b", c.b, rep, 8);
  const auto sdy = shardsim::distribute<float>("grad(y)", c.dy, seq, 8);
  shardsim::LayerNormShardedSaved<float> ssaved;
  shardsim::DistTensor<float> sy;
  shardsim::LayerNormShardedGrads<float> grads;
  auto sharded = [&] {
    trace.clear();
    sy = shardsim::layer_norm_row_sharded(world, sx, &sw, &sb, c.params, "y", ssaved);
    grads = shardsim::layer_norm_row_sharded_backward(world, sdy, sx, &sw, &sb, ssaved, c.params,
                                                      "grad(x)", "grad(w)", "grad(b)");
    world.compare_boundary({.op = "layer_norm_backward", .tensor = "grad(x)"}, grads.dx);
  };
  sharded();
  c.run();
  // Each rank's rows are the dense rows: y and dx must equal the dense kernel's bitwise.
  int failures = 0;
  for (int r = 0; r < 8; ++r) {
    const auto slice = shardsim::rank_slice(c.x.shape(), seq, 8, r);
    const std::int64_t off = slice.begin * h, n = slice.valid() * h;
    if (std::memcmp(sy.local(r).data(), c.y.data() + off, n * sizeof(float)) != 0 ||
        std::memcmp(grads.dx.local(r).data(), c.dx.data() + off, n * sizeof(float)) != 0) {
      std::printf("  rank %d: sharded y/dx differ from dense bitwise\n", r);
      ++failures;
    }
  }
  if (o.smoke) return failures;
  const auto [dense_s, sharded_s] = interleave(
      reps, [&] { c.run(); }, sharded);
  std::printf("  dense %.2f ms, sharded (8 ranks, %zu trace entries) %.2f ms\n", dense_s * 1e3,
              trace.size(), sharded_s * 1e3);
  verdict(2, "sharded / dense time (f32 fwd+bwd)", sharded_s / dense_s, 1.15, false);
  return failures;
}

}  // namespace bench
