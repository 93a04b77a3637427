// Target 3: mp256 LayerNorm forward, and the attention inner products, each against a raw MPFR loop
// with stack-allocated temporaries, and the heap allocations per element of the kernels (counted
// through GMP's memory functions, which MPFR uses for every number it allocates).
#include <gmp.h>
#include <mpfr.h>

#include <cstdio>

#include "bench.hpp"
#include "core/mp.hpp"
#include "ops/attention/attention-inl.hpp"
#include "ops/layer_norm/layer_norm-inl.hpp"

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

// The attention inner products of every query row (causal, one head): s_ij = (q_i . k_j) * scale,
// one accumulator over d ascending, written into preallocated outputs `rs` (row-major over the
// allowed keys), with one stack temporary.
void raw_mpfr_scores(const shardsim::Tensor<Mp>& q, const shardsim::Tensor<Mp>& k, const Mp& scale,
                     std::int64_t seq, std::int64_t dim, mpfr_prec_t prec,
                     std::vector<mpfr_t>& rs) {
  MPFR_DECL_INIT(dot, prec);
  MPFR_DECL_INIT(product, prec);
  std::size_t out = 0;
  for (std::int64_t i = 0; i < seq; ++i) {
    for (std::int64_t j = 0; j <= i; ++j) {
      mpfr_set_zero(dot, 1);
      for (std::int64_t d = 0; d < dim; ++d) {
        mpfr_mul(product, q[i * dim + d].backend().data(), k[j * dim + d].backend().data(),
                 MPFR_RNDN);
        mpfr_add(dot, dot, product, MPFR_RNDN);
      }
      mpfr_mul(rs[out++], dot, scale.backend().data(), MPFR_RNDN);
    }
  }
}

// How many of the kernel's scores (one vector per query row, row i holding keys 0..i) differ
// from the raw loop's (row-major over the same keys) in value or in the sign of a zero.
std::size_t count_differing_scores(const std::vector<std::vector<Mp>>& rows,
                                   const std::vector<mpfr_t>& rs) {
  std::size_t differing = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].size() != i + 1) {
      differing += i + 1;
      at += i + 1;
      continue;
    }
    for (const Mp& score : rows[i]) {
      const auto view = score.backend().data();  // the mpfr_t lives as long as `view`
      mpfr_srcptr kernel_value = view;
      mpfr_srcptr raw_value = rs[at++];
      const bool same_sign = (mpfr_signbit(kernel_value) != 0) == (mpfr_signbit(raw_value) != 0);
      if (mpfr_cmp(kernel_value, raw_value) != 0 || !same_sign) ++differing;
    }
  }
  return differing;
}

// Target 3, second part: the attention kernel's inner products (detail::row_scores, which every
// attention forward and backward calls per query row) against the raw loop above. Both compute
// every sum in the same order, so the scores must agree bit for bit.
int attention_scores_part(const Options& o, mpfr_prec_t prec) {
  using shardsim::Shape;
  const std::int64_t seq = o.smoke ? 9 : o.quick ? 96 : 192;
  const std::int64_t dim = 64;
  const int reps = o.smoke ? 1 : o.quick ? 5 : 9;
  const Shape q_shape = shardsim::head_shape(1, "seq", seq, 1, dim);
  const Shape k_shape = shardsim::head_shape(1, "kv", seq, 1, dim);
  shardsim::Tensor<Mp> q(q_shape);
  shardsim::Tensor<Mp> k(k_shape);
  for (std::int64_t i = 0; i < seq * dim; ++i) {
    q[i] = Mp(-0.5 + 1e-3 * double((i * 7919) % 1009));
    k[i] = Mp(0.25 - 1e-3 * double((i * 104729) % 997));
  }
  std::vector<std::int64_t> positions(static_cast<std::size_t>(seq));
  for (std::int64_t i = 0; i < seq; ++i) positions[static_cast<std::size_t>(i)] = i;
  const shardsim::AttentionParams params;  // causal, no window
  const Mp scale = Mp(1) / sqrt(Mp(dim));
  const shardsim::detail::HeadStrides q_layout(q_shape, "seq");
  const shardsim::detail::HeadStrides k_layout(k_shape, "kv");
  // The kernel's scores, one vector per query row (kept across calls, as a kernel keeps its
  // row buffers, so a repeated call allocates only each row's scratch).
  std::vector<std::vector<Mp>> rows(static_cast<std::size_t>(seq));
  std::vector<std::int64_t> keys;
  const shardsim::detail::DotOperands<Mp> key_rows;  // dd/qd only: empty at mp
  auto kernel = [&] {
    for (std::int64_t i = 0; i < seq; ++i) {
      shardsim::detail::row_scores(q, q_layout, k, k_layout, 0, 0, i,
                                   positions[static_cast<std::size_t>(i)], positions, params, scale,
                                   key_rows, keys, rows[static_cast<std::size_t>(i)]);
    }
  };
  std::vector<mpfr_t> rs(static_cast<std::size_t>(seq * (seq + 1) / 2));
  for (auto& v : rs) mpfr_init2(v, prec);
  auto raw = [&] { raw_mpfr_scores(q, k, scale, seq, dim, prec, rs); };
  kernel();
  raw();
  int failures = 0;
  const std::size_t differing = count_differing_scores(rows, rs);
  if (differing != 0) {
    std::printf("  attention scores: kernel and raw MPFR loop differ in %zu of %zu values\n",
                differing, rs.size());
    ++failures;
  }
  // Allocations of a repeated row: its scratch (four accumulators, a product, the zero the row
  // is sized with), about 6, against 2 per multiply-add (64 per score) with Boost's operators.
  std::vector<Mp>& last = rows.back();  // already sized by the calls above
  const std::int64_t allocations = count_allocations([&] {
    shardsim::detail::row_scores(q, q_layout, k, k_layout, 0, 0, seq - 1, seq - 1, positions,
                                 params, scale, key_rows, keys, last);
  });
  std::printf("  attention scores: heap allocations for one row of %lld scores: %lld\n",
              (long long)seq, (long long)allocations);
  if (allocations > 16) {
    std::printf("  the attention scores allocate per score or per element (more than 16)\n");
    ++failures;
  }
  if (!o.smoke) {
    const double products = double(rs.size()) * double(dim);
    const auto [kernel_s, raw_s] = interleave(reps, kernel, raw);
    std::printf(
        "  [mp%u seq %lld, head_dim %lld, causal] shardsim %.2f M mul-add/s, raw MPFR "
        "%.2f M mul-add/s\n",
        shardsim::mp_significand_bits(), (long long)seq, (long long)dim, products / kernel_s * 1e-6,
        products / raw_s * 1e-6);
    verdict(3, "mp256 attention inner products / raw MPFR loop", raw_s / kernel_s, 0.9, true);
  }
  for (auto& v : rs) mpfr_clear(v);
  return failures;
}

}  // namespace

int target_mp(const Options& o) {
  const ThreadCount one_thread(1);  // the raw MPFR loops run on one thread
  std::printf("Target 3: mp256 LayerNorm forward vs raw MPFR loop, one thread\n");
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
    verdict(3, "mp256 LayerNorm fwd / raw MPFR loop", raw_s / kernel_s, 0.9, true);
  }
  for (auto& v : ry) mpfr_clear(v);
  return failures + attention_scores_part(o, prec);
}

}  // namespace bench
