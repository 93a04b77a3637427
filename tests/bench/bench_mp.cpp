// Target 3: mp256 LayerNorm forward vs a raw MPFR loop with stack-allocated temporaries, and the
// heap allocations per element of the kernel (counted through GMP's memory functions, which MPFR
// uses for every number it allocates).
#include <gmp.h>
#include <mpfr.h>

#include <cstdio>

#include "bench.hpp"
#include "shardsim/mp.hpp"
#include "shardsim/ops/layer_norm-inl.hpp"

namespace bench {

using shardsim::Mp;

namespace {

// Counting wrappers around GMP's allocator (installed only while one kernel call is measured).
std::int64_t g_allocations = 0;
void* (*g_alloc)(size_t) = nullptr;
void* (*g_realloc)(void*, size_t, size_t) = nullptr;
void (*g_free)(void*, size_t) = nullptr;
void* counting_alloc(size_t n) {
  ++g_allocations;
  return g_alloc(n);
}
void* counting_realloc(void* p, size_t old_n, size_t n) {
  ++g_allocations;
  return g_realloc(p, old_n, n);
}

// Heap allocations made by MPFR/GMP during one call of f.
std::int64_t count_allocations(const std::function<void()>& f) {
  mp_get_memory_functions(&g_alloc, &g_realloc, &g_free);
  g_allocations = 0;
  mp_set_memory_functions(counting_alloc, counting_realloc, g_free);
  f();
  mp_set_memory_functions(g_alloc, g_realloc, g_free);
  return g_allocations;
}

// The raw loop: outputs preallocated in `ry`, temporaries on the stack (MPFR_DECL_INIT),
// sequential.
void raw_mpfr_layer_norm(const shardsim::Tensor<Mp>& x, const shardsim::Tensor<Mp>& w,
                         const shardsim::Tensor<Mp>& b, double eps, std::int64_t rows,
                         std::int64_t h, mpfr_prec_t prec, std::vector<mpfr_t>& ry) {
  MPFR_DECL_INIT(sum, prec);
  MPFR_DECL_INIT(mean, prec);
  MPFR_DECL_INIT(c, prec);
  MPFR_DECL_INIT(rstd, prec);
  for (std::int64_t r = 0; r < rows; ++r) {
    const Mp* xr = x.data() + r * h;
    mpfr_set_zero(sum, 1);
    for (std::int64_t i = 0; i < h; ++i) mpfr_add(sum, sum, xr[i].backend().data(), MPFR_RNDN);
    mpfr_div_si(mean, sum, static_cast<long>(h), MPFR_RNDN);
    mpfr_set_zero(sum, 1);
    for (std::int64_t i = 0; i < h; ++i) {
      mpfr_sub(c, xr[i].backend().data(), mean, MPFR_RNDN);
      mpfr_mul(c, c, c, MPFR_RNDN);
      mpfr_add(sum, sum, c, MPFR_RNDN);
    }
    mpfr_div_si(rstd, sum, static_cast<long>(h), MPFR_RNDN);
    mpfr_add_d(rstd, rstd, eps, MPFR_RNDN);
    mpfr_rec_sqrt(rstd, rstd, MPFR_RNDN);  // one rounding (the kernel rounds twice; same cost)
    for (std::int64_t i = 0; i < h; ++i) {
      mpfr_ptr out = ry[static_cast<std::size_t>(r * h + i)];
      mpfr_sub(out, xr[i].backend().data(), mean, MPFR_RNDN);
      mpfr_mul(out, out, rstd, MPFR_RNDN);
      mpfr_mul(out, out, w[i].backend().data(), MPFR_RNDN);
      mpfr_add(out, out, b[i].backend().data(), MPFR_RNDN);
    }
  }
}

}  // namespace

int target_mp(const Options& o) {
  std::printf("Target 3: mp256 LayerNorm forward vs raw MPFR loop\n");
  shardsim::set_mp_precision(256);
  const mpfr_prec_t prec = static_cast<mpfr_prec_t>(shardsim::mp_significand_bits());
  const std::int64_t rows = o.smoke ? 3 : o.quick ? 32 : 128;
  const std::int64_t h = o.smoke ? 67 : 1024;
  const int reps = o.smoke ? 1 : o.quick ? 5 : 9;
  using shardsim::Axis;
  using shardsim::Shape;
  shardsim::Tensor<Mp> x(Shape(std::vector<Axis>{{"seq", rows}, {"hidden", h}}));
  shardsim::Tensor<Mp> w(Shape(std::vector<Axis>{{"hidden", h}}));
  shardsim::Tensor<Mp> b(Shape(std::vector<Axis>{{"hidden", h}}));
  for (std::int64_t i = 0; i < rows * h; ++i) x[i] = Mp(0.25 + 1e-3 * double((i * 7919) % 4001));
  for (std::int64_t i = 0; i < h; ++i) {
    w[i] = Mp(1.0 + 1e-3 * double(i % 97));
    b[i] = Mp(-0.5 + 1e-3 * double(i % 89));
  }
  shardsim::LayerNormParams params;
  shardsim::Tensor<Mp> y;
  shardsim::LayerNormSaved<Mp> saved;
  auto kernel = [&] { shardsim::layer_norm_forward(x, &w, &b, params, y, saved); };

  // The raw MPFR loop, preallocated outputs.
  std::vector<mpfr_t> ry(static_cast<std::size_t>(rows * h));
  for (auto& v : ry) mpfr_init2(v, prec);
  auto raw = [&] { raw_mpfr_layer_norm(x, w, b, params.eps, rows, h, prec, ry); };
  kernel();
  raw();
  // The two differ only by summation order and rsqrt rounding: a few ulps of 2^-257 relative,
  // amplified by at most |x - mean| * rstd ~ 10. 2^-240 leaves ~2^14 ulps of room.
  int failures = 0;
  MPFR_DECL_INIT(d, prec);
  double worst = 0;
  for (std::int64_t i = 0; i < rows * h; ++i) {
    mpfr_sub(d, y[i].backend().data(), ry[static_cast<std::size_t>(i)], MPFR_RNDN);
    worst = std::max(worst, std::abs(mpfr_get_d(d, MPFR_RNDN)));
  }
  if (!(worst <= std::ldexp(1.0, -240))) {
    std::printf("  kernel and raw MPFR loop disagree: %.3g\n", worst);
    ++failures;
  }
  // No allocation per element: a repeated call (y already has x's shape, so its elements are
  // kept, tensor.hpp prepare_output) allocates only per row and per block of rows: mean and
  // rstd, the row statistics' temporaries and the block's scratch values, a count that does not
  // grow with the row length (about 14 per row in blocks of four, up to 17 for a lone tail
  // row). One allocation per element would add h (1024 here) per row; more than 32 per row
  // fails.
  const std::int64_t allocations = count_allocations(kernel);
  std::printf(
      "  heap allocations in a repeated call: %lld (%.2f per row of %lld, %.4f per element)\n",
      (long long)allocations, double(allocations) / double(rows), (long long)h,
      double(allocations) / double(rows * h));
  if (allocations > 32 * rows) {
    std::printf("  the kernel allocates per element (more than 32 per row)\n");
    ++failures;
  }
  if (!o.smoke) {
    const double elems = double(rows) * double(h);
    const auto [kernel_s, raw_s] = interleave(reps, kernel, raw);
    std::printf("  [mp%u %lldx%lld fwd] shardsim %.2f M elem/s, raw MPFR %.2f M elem/s\n",
                shardsim::mp_significand_bits(), (long long)rows, (long long)h,
                elems / kernel_s * 1e-6, elems / raw_s * 1e-6);
    verdict(3, "mp256 LayerNorm fwd / raw MPFR loop", raw_s / kernel_s, 0.8, true);
  }
  for (auto& v : ry) mpfr_clear(v);
  return failures;
}

}  // namespace bench
