// The exact dot product of dd/qd values (qd_dot.hpp) against MPFR: the long accumulator's sums and
// roundings, ExactDot on expansions, its non-finite cases, and the projection kernels that use it.
#include "core/qd_dot.hpp"

#include <mpfr.h>

#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "ops/attention/project.hpp"
#include "ops/linear/linear.hpp"

using namespace shardsim;

namespace {

// 3400 bits hold every sum here exactly: products of terms reach down to 2^-2148 (two least
// subnormals) and sums stay below 2^1100.
constexpr mpfr_prec_t kExactBits = 3400;

struct Exact {
  mpfr_t v;
  Exact() {
    mpfr_init2(v, kExactBits);
    mpfr_set_zero(v, 1);
  }
  ~Exact() { mpfr_clear(v); }
  Exact(const Exact&) = delete;
  Exact& operator=(const Exact&) = delete;
  void add(double x) { REQUIRE(mpfr_add_d(v, v, x, MPFR_RNDN) == 0); }  // 0: exact
  void add_product(double a, double b) {
    Exact p;
    REQUIRE(mpfr_set_d(p.v, a, MPFR_RNDN) == 0);
    REQUIRE(mpfr_mul_d(p.v, p.v, b, MPFR_RNDN) == 0);
    REQUIRE(mpfr_add(v, v, p.v, MPFR_RNDN) == 0);
  }
  // The reference for split(): x_i = RN(S - x_0 - ... - x_(i-1)), MPFR's correct rounding to
  // double, each subtraction exact at kExactBits.
  std::vector<double> greedy(int n) {
    std::vector<double> out;
    for (int i = 0; i < n; ++i) {
      out.push_back(mpfr_get_d(v, MPFR_RNDN));
      if (std::isinf(out.back())) {
        out.resize(static_cast<std::size_t>(n), 0.0);
        break;
      }
      REQUIRE(mpfr_sub_d(v, v, out.back(), MPFR_RNDN) == 0);
    }
    return out;
  }
};

std::uint64_t bits(double x) { return std::bit_cast<std::uint64_t>(x); }

// Doubles over the whole range: normal, subnormal, huge, and cancelling pairs.
double wide_double(std::mt19937_64& rng) {
  std::uniform_real_distribution<double> mant(1.0, 2.0);
  std::uniform_int_distribution<int> kind(0, 9), exp_all(-1074, 1000), exp_mid(-60, 60);
  const double sign = rng() & 1 ? -1.0 : 1.0;
  switch (kind(rng)) {
    case 0:
      return sign * std::ldexp(mant(rng), exp_all(rng));  // anywhere, subnormals too
    case 1:
      return sign * std::bit_cast<double>(rng() & ((std::uint64_t(1) << 52) - 1));
    default:
      return sign * std::ldexp(mant(rng), exp_mid(rng));
  }
}

// A double with exponent in [lo, hi], either sign.
double ranged_double(std::mt19937_64& rng, int lo, int hi) {
  std::uniform_real_distribution<double> mant(1.0, 2.0);
  std::uniform_int_distribution<int> exponent(lo, hi);
  return (rng() & 1 ? -1.0 : 1.0) * std::ldexp(mant(rng), exponent(rng));
}

// A qd (or dd) value with all its terms in use: a quotient, renormalized by QD.
template <typename R>
Expansion<R> full_expansion(std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(-4.0, 4.0);
  return Expansion<R>(u(rng)) / Expansion<R>(u(rng) + 7.0);
}

}  // namespace

TEST_CASE("qd dot: the long accumulator sums doubles exactly and splits them as MPFR rounds",
          "[qd]") {
  std::mt19937_64 rng(20261202);
  for (int trial = 0; trial < 400; ++trial) {
    LongAccumulator acc;
    acc.clear();
    Exact exact;
    const int n = 1 + static_cast<int>(rng() % 64);
    for (int i = 0; i < n; ++i) {
      const double x = wide_double(rng);
      acc.add(x);
      exact.add(x);
      if (i % 7 == 3) {  // cancellation: x and nearly -x
        acc.add(-x * 0.5);
        exact.add(-x * 0.5);
      }
    }
    double out[4];
    acc.split(out, 4);
    const std::vector<double> want = exact.greedy(4);
    for (int i = 0; i < 4; ++i) {
      INFO("trial " << trial << " term " << i << ": " << out[i] << " vs " << want[i]);
      REQUIRE(bits(out[i]) == bits(want[i]));
    }
  }
}

TEST_CASE("qd dot: ties round to even, zero is +0, overflow is inf (derived by hand)", "[qd]") {
  const auto split = [](std::initializer_list<double> xs) {
    LongAccumulator acc;
    acc.clear();
    for (double x : xs) acc.add(x);
    std::vector<double> out(4);
    acc.split(out.data(), 4);
    return out;
  };
  // 1 + 2^-53 is halfway between 1 and 1 + 2^-52: even is 1, the remainder 2^-53 exact.
  CHECK(split({1.0, 0x1p-53}) == std::vector<double>{1.0, 0x1p-53, 0, 0});
  // 1 + 3 2^-53 is halfway between 1 + 2^-52 and 1 + 2^-51: even is 1 + 2^-51, remainder -2^-53.
  CHECK(split({1.0, 0x1p-53, 0x1p-52}) == std::vector<double>{1.0 + 0x1p-51, -0x1p-53, 0, 0});
  // Just above the tie: 1 + 2^-53 + 2^-200 rounds up; the rest is -2^-53 + 2^-200, whose RN is
  // -2^-53 (2^-200 is far below its half ulp) and then 2^-200.
  CHECK(split({1.0, 0x1p-53, 0x1p-200}) ==
        std::vector<double>{1.0 + 0x1p-52, -0x1p-53, 0x1p-200, 0});
  // x - x is +0 in every term, as IEEE's round to nearest gives for an exact zero sum.
  const std::vector<double> zero = split({-3.5, 3.5});
  for (double z : zero) CHECK(bits(z) == 0);
  // At the bottom of the range: 2^-1074 + 2^-1073 = 3 x 2^-1074, a subnormal held exactly.
  CHECK(split({0x1p-1074, 0x1p-1073}) == std::vector<double>{0x1.8p-1073, 0, 0, 0});
  // DBL_MAX + DBL_MAX rounds past the range: +inf, the other terms 0.
  const double big = std::numeric_limits<double>::max();
  CHECK(split({big, big}) == std::vector<double>{INFINITY, 0, 0, 0});
  CHECK(split({-big, -big})[0] == -INFINITY);
}

TEMPLATE_TEST_CASE("qd dot: ExactDot is the exact dot product of the terms, rounded greedily",
                   "[qd]", dd_real, qd_real) {
  using V = Expansion<TestType>;
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    ExactDot<TestType> dot;
    dot.clear();
    Exact exact;
    const int n = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) {
      // Mixed: full expansions, single doubles (the f64-input fast path), products from below
      // 2^-1074 (their exact bits lie under the least subnormal) to about 2^1000.
      const int kind = static_cast<int>(rng() % 4);
      const V a = kind == 0 ? V(ranged_double(rng, -540, 500)) : full_expansion<TestType>(rng);
      const V b = kind == 1 ? full_expansion<TestType>(rng) : V(ranged_double(rng, -540, 500));
      dot.add(a, b);
      for (int p = 0; p < V::kTerms; ++p) {
        for (int q = 0; q < V::kTerms; ++q) {
          if (a.term(p) != 0 && b.term(q) != 0) exact.add_product(a.term(p), b.term(q));
        }
      }
    }
    const V got = dot.value();
    const std::vector<double> want = exact.greedy(V::kTerms);
    for (int i = 0; i < V::kTerms; ++i) {
      INFO("trial " << trial << " term " << i);
      REQUIRE(bits(got.term(i)) == bits(want[static_cast<std::size_t>(i)]));
    }
  }
}

TEST_CASE("qd dot: non-finite operands give the IEEE sum of the leading products", "[qd]") {
  const auto dot_of = [](std::initializer_list<std::pair<double, double>> pairs) {
    ExactDot<qd_real> dot;
    dot.clear();
    for (const auto& [a, b] : pairs) dot.add(Qd(a), Qd(b));
    return dot.value();
  };
  CHECK(dot_of({{1.0, 2.0}, {INFINITY, 3.0}}).term(0) == INFINITY);
  CHECK(std::isnan(dot_of({{INFINITY, 0.0}}).term(0)));                    // inf 0
  CHECK(std::isnan(dot_of({{INFINITY, 1.0}, {-INFINITY, 1.0}}).term(0)));  // inf - inf
  CHECK(std::isnan(dot_of({{NAN, 1.0}, {1.0, 1.0}}).term(0)));
  // 2^600 2^600 overflows in IEEE and in the accumulator's range check alike.
  CHECK(dot_of({{0x1p600, 0x1p600}}).term(0) == INFINITY);
  // The sign of an exact zero: +0, as a sequential sum started at +0 gives.
  CHECK(bits(dot_of({{-1.0, 0.0}, {0.0, -2.0}}).term(0)) == 0);
  CHECK(bits(dot_of({{1.5, 2.0}, {-3.0, 1.0}}).term(0)) == 0);
}

TEMPLATE_TEST_CASE("qd dot: the qd and dd projections are exact dot products rounded once", "[qd]",
                   dd_real, qd_real) {
  // project_heads: y[b,s,h,d] = sum_c x[b,s,c] w[c,h,d]; with x a full expansion (as after an
  // earlier op) each output is the MPFR-exact sum of every term product, rounded greedily.
  using V = Expansion<TestType>;
  std::mt19937_64 rng(11);
  const std::int64_t seq = 3, hidden = 24, heads = 2, dim = 3;
  Tensor<V> x(Shape({{"batch", 1}, {"seq", seq}, {"hidden", hidden}}));
  Tensor<V> w(Shape({{"hidden", hidden}, {"head", heads}, {"head_dim", dim}}));
  for (std::int64_t i = 0; i < x.numel(); ++i) x[i] = full_expansion<TestType>(rng);
  for (std::int64_t i = 0; i < w.numel(); ++i) w[i] = V(wide_double(rng));
  Tensor<V> y;
  project_heads(x, w, y);
  for (std::int64_t s = 0; s < seq; ++s) {
    for (std::int64_t j = 0; j < heads * dim; ++j) {
      Exact exact;
      for (std::int64_t c = 0; c < hidden; ++c) {
        const V& a = x[s * hidden + c];
        const V& b = w[c * heads * dim + j];
        for (int p = 0; p < V::kTerms; ++p) {
          if (a.term(p) != 0) exact.add_product(a.term(p), b.term(0));
        }
      }
      const std::vector<double> want = exact.greedy(V::kTerms);
      const V& got = y[s * heads * dim + j];
      for (int i = 0; i < V::kTerms; ++i) {
        INFO("row " << s << " output " << j << " term " << i);
        REQUIRE(bits(got.term(i)) == bits(want[static_cast<std::size_t>(i)]));
      }
    }
  }
}

TEST_CASE("qd dot: a qd linear layer's output is the exact sum of products and bias, rounded once",
          "[qd]") {
  // y[s, k] = RN(sum_i x[s, i] W[k, i] + b[k]): products and bias in one exact sum (dot_sum.hpp).
  std::mt19937_64 rng(13);
  const std::int64_t rows = 2, in = 9, out = 4;
  Tensor<Qd> x(Shape({{"seq", rows}, {"hidden", in}}));
  Tensor<Qd> weight(Shape({{"ffn", out}, {"hidden", in}}));
  Tensor<Qd> bias(Shape({{"ffn", out}}));
  for (std::int64_t i = 0; i < x.numel(); ++i) x[i] = full_expansion<qd_real>(rng);
  for (std::int64_t i = 0; i < weight.numel(); ++i) weight[i] = full_expansion<qd_real>(rng);
  for (std::int64_t i = 0; i < bias.numel(); ++i) bias[i] = full_expansion<qd_real>(rng);
  Tensor<Qd> y;
  linear_forward(x, weight, &bias, LinearParams{}, y);
  for (std::int64_t s = 0; s < rows; ++s) {
    for (std::int64_t k = 0; k < out; ++k) {
      Exact exact;
      for (std::int64_t i = 0; i < in; ++i) {
        for (int p = 0; p < 4; ++p) {
          for (int q = 0; q < 4; ++q) {
            const double a = x[s * in + i].term(p), b = weight[k * in + i].term(q);
            if (a != 0 && b != 0) exact.add_product(a, b);
          }
        }
      }
      for (int p = 0; p < 4; ++p) exact.add(bias[k].term(p));
      const std::vector<double> want = exact.greedy(4);
      for (int i = 0; i < 4; ++i) {
        INFO("row " << s << " feature " << k << " term " << i);
        REQUIRE(bits(y[s * out + k].term(i)) == bits(want[static_cast<std::size_t>(i)]));
      }
    }
  }
}

TEMPLATE_TEST_CASE("qd dot: unpacked operands give the bits of element-by-element adds", "[qd]",
                   dd_real, qd_real) {
  // ExactDot::add(Operand, Operand) must be add(a_i, b_i) for every i (the kernels' previous
  // loop, itself checked against MPFR above): the same exact sum, the same IEEE sum of the
  // leading products for the non-finite fallback, the same overflow flag. Vectors mix full
  // expansions, single doubles, zeros (whole zero vectors too), subnormals, huge values whose
  // products overflow, infinities and NaNs, and ranges at offsets.
  using V = Expansion<TestType>;
  using Operand = typename ExactDot<TestType>::Operand;
  std::mt19937_64 rng(23);
  const auto element = [&](int mode) -> V {
    const int kind = static_cast<int>(rng() % 16);
    if (kind == 0) return V(0.0);
    if (kind == 1 && mode >= 1) return V(std::bit_cast<double>(rng() % (1u << 20)));  // subnormal
    if (kind == 2 && mode >= 2) return V(ranged_double(rng, 500, 1023));  // products overflow
    if (kind == 3 && mode >= 3) return V(rng() & 1 ? INFINITY : NAN);
    if (kind == 4 && mode >= 2) return V(std::numeric_limits<double>::max());  // lead_ overflows
    if (kind < 10) return V(ranged_double(rng, -40, 40));
    return full_expansion<TestType>(rng);
  };
  for (int trial = 0; trial < 2000; ++trial) {
    const int mode = trial % 8 < 5 ? 0 : trial % 8 - 4;  // mostly finite, ordinary magnitudes
    const std::int64_t n = 1 + static_cast<std::int64_t>(rng() % 70);
    const bool zero_a = rng() % 10 == 0;
    std::vector<V> a(static_cast<std::size_t>(n)), b(static_cast<std::size_t>(n));
    for (V& x : a) x = zero_a ? V(0.0) : element(mode);
    for (V& x : b) x = element(mode);
    Operand pa, pb;
    pa.assign(n, [&](std::int64_t i) -> const V& { return a[static_cast<std::size_t>(i)]; });
    pb.assign(n, [&](std::int64_t i) -> const V& { return b[static_cast<std::size_t>(i)]; });
    // A range: [a0, a0 + len) of a against [b0, b0 + len) of b, after a leading element pair
    // added directly (the two kinds of add mix in one sum).
    const std::int64_t len = 1 + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(n));
    const std::int64_t a0 =
        static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(n - len + 1));
    const std::int64_t b0 =
        static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(n - len + 1));
    const V first_a = element(mode), first_b = element(0);
    ExactDot<TestType> packed, plain;
    packed.clear();
    plain.clear();
    packed.add(first_a, first_b);
    plain.add(first_a, first_b);
    if (trial % 2 == 0) {
      packed.add(pa, pb);
      for (std::int64_t i = 0; i < n; ++i) {
        plain.add(a[static_cast<std::size_t>(i)], b[static_cast<std::size_t>(i)]);
      }
    } else {
      packed.add(pa, a0, pb, b0, len);
      for (std::int64_t i = 0; i < len; ++i) {
        plain.add(a[static_cast<std::size_t>(a0 + i)], b[static_cast<std::size_t>(b0 + i)]);
      }
    }
    const V got = packed.value(), want = plain.value();
    for (int i = 0; i < V::kTerms; ++i) {
      INFO("trial " << trial << " mode " << mode << " term " << i << ": " << got.term(i) << " vs "
                    << want.term(i));
      REQUIRE(bits(got.term(i)) == bits(want.term(i)));
    }
  }
}

TEST_CASE("qd dot: unpacked operands at a hand-derived overflow of the leading sum", "[qd]") {
  // max + max - max: every product is finite and the exact sum is max, but the IEEE sum of the
  // leading products (the fallback value) is inf after the second addition; the element-wise
  // ExactDot returns that inf (value() takes lead_ once it is not finite), so must the unpacked.
  const double big = std::numeric_limits<double>::max();
  const std::vector<Qd> a{Qd(big), Qd(big), Qd(-big)}, b{Qd(1.0), Qd(1.0), Qd(1.0)};
  ExactDot<qd_real>::Operand pa, pb;
  pa.assign(3, [&](std::int64_t i) -> const Qd& { return a[static_cast<std::size_t>(i)]; });
  pb.assign(3, [&](std::int64_t i) -> const Qd& { return b[static_cast<std::size_t>(i)]; });
  ExactDot<qd_real> dot;
  dot.clear();
  dot.add(pa, pb);
  CHECK(dot.value().term(0) == INFINITY);
  // 2^-1074 * 2^-1 twice: exactly 2^-1074 in the accumulator (two products of 2^-1075 each).
  const std::vector<Qd> tiny{Qd(0x1p-1074), Qd(0x1p-1074)}, half{Qd(0.5), Qd(0.5)};
  ExactDot<qd_real>::Operand pt, ph;
  pt.assign(2, [&](std::int64_t i) -> const Qd& { return tiny[static_cast<std::size_t>(i)]; });
  ph.assign(2, [&](std::int64_t i) -> const Qd& { return half[static_cast<std::size_t>(i)]; });
  dot.clear();
  dot.add(pt, ph);
  CHECK(dot.value().term(0) == 0x1p-1074);
}

TEMPLATE_TEST_CASE("qd dot: unpacked products whose column sums pass 2^127 and 2^128", "[qd]",
                   dd_real, qd_real) {
  // The unpacked operands sum each bucket pair's products in signed 128-bit column sums (four
  // sets, consecutive products in turn) that count their wraps past +-2^127 in a carry word
  // (ExactDot's columns). x = 2 - 2^-52 has the significand 2^53 - 1 at e = 1023, e mod 8 = 7, so
  // its scaled integer is (2^53 - 1) 2^7, just below 2^60, and x x lands in one column as just
  // below 2^120. 700 such products put 175 in each set, about 2^127.45: every set wraps, so the
  // carries must be kept, and the column's total (about 2^129.45) is folded as 192 bits; all
  // negative, its two's complement must be negated; mixed, the wraps must cancel. The exact
  // value, derived by hand: sum = (n_plus - n_minus) x^2 with x^2 = 4 - 2^-50 + 2^-104 exactly,
  // checked against MPFR and against element-by-element adds.
  using V = Expansion<TestType>;
  using Operand = typename ExactDot<TestType>::Operand;
  const double x = 2.0 - 0x1p-52;
  for (const int minus : {0, 700, 350, 349, 1, 699}) {
    const std::int64_t n = 700;
    std::vector<V> a(static_cast<std::size_t>(n), V(x)), b;
    // i 3 mod 700 runs over 0..699 once (3 and 700 are coprime): exactly `minus` negatives.
    for (std::int64_t i = 0; i < n; ++i) b.push_back(V(i * 3 % n < minus ? -x : x));
    Operand pa, pb;
    pa.assign(n, [&](std::int64_t i) -> const V& { return a[static_cast<std::size_t>(i)]; });
    pb.assign(n, [&](std::int64_t i) -> const V& { return b[static_cast<std::size_t>(i)]; });
    ExactDot<TestType> packed, plain;
    packed.clear();
    plain.clear();
    packed.add(pa, pb);
    for (std::int64_t i = 0; i < n; ++i) {
      plain.add(a[static_cast<std::size_t>(i)], b[static_cast<std::size_t>(i)]);
    }
    Exact sum;
    Exact square;
    REQUIRE(mpfr_set_d(square.v, x, MPFR_RNDN) == 0);
    REQUIRE(mpfr_mul_d(square.v, square.v, x, MPFR_RNDN) == 0);
    REQUIRE(mpfr_mul_si(sum.v, square.v, n - 2 * minus, MPFR_RNDN) == 0);
    const std::vector<double> want = sum.greedy(V::kTerms);
    const V got = packed.value(), element_wise = plain.value();
    for (int i = 0; i < V::kTerms; ++i) {
      INFO("minus " << minus << " term " << i << ": " << got.term(i) << " vs " << want[i]);
      CHECK(bits(got.term(i)) == bits(want[static_cast<std::size_t>(i)]));
      CHECK(bits(got.term(i)) == bits(element_wise.term(i)));
    }
  }
}
