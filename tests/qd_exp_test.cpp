// exp_each at qd (qd_exp.cpp): QD's exp evaluated four values at a time must give, for every
// argument, the bits of QD's own exp (the scalar exp in qd.hpp, which calls libqd), under each
// instruction set; and the Taylor coefficients it carries must be 1/n!.
#include <mpfr.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "lane_isa_test_support.hpp"
#include "core/qd.hpp"

using namespace shardsim;

namespace {

// a + b in QD's arithmetic (renormalized), so that the arguments are well-formed qd values.
Qd plus(double a, double b) { return Qd(a) + Qd(b); }

// Arguments of every kind exp meets, and the edges of QD's domain.
std::vector<Qd> arguments() {
  std::vector<Qd> xs;
  std::mt19937_64 gen(2026);
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  auto full = [&](double lead) {  // lead with three random tail terms below its last bit
    Qd x = plus(lead, lead * 0x1p-54 * unit(gen));
    x = x + Qd(lead * 0x1p-108 * unit(gen));
    return x + Qd(lead * 0x1p-162 * unit(gen));
  };
  for (int i = 0; i < 3000; ++i) xs.push_back(full(-60.0 * std::fabs(unit(gen))));  // softmax
  for (int i = 0; i < 3000; ++i) xs.push_back(full(708.9 * unit(gen)));             // whole range
  for (int k = 1; k <= 1074; k += 7) {  // small magnitudes down to the least subnormal
    xs.push_back(Qd(std::ldexp(1.0, -k)));
    xs.push_back(full(-std::ldexp(1.5, -k)));
  }
  // Near multiples of log 2 (r = 0 or tiny: the series' terms underflow or vanish), and doubles
  // with zero tails.
  const Qd log2(qd_real::_log2);
  for (int m = -1000; m <= 1000; m += 37) {
    const Qd base = log2 * Qd(m);
    for (double offset : {0.0, 0x1p-30, -0x1p-60, 0x1p-200, -0x1p-600}) {
      xs.push_back(base + Qd(offset));
    }
  }
  // Near multiples of log 2 at random distances 2^-20 to 2^-220, where the reduced argument has
  // zero terms and QD's renorm leaves its common path (the lanes must hand these to libqd), and
  // single doubles (zero tails).
  for (int i = 0; i < 1500; ++i) {
    const Qd base = log2 * Qd(static_cast<int>(gen() % 2001) - 1000);
    xs.push_back(base + Qd(std::ldexp(unit(gen), -20 - static_cast<int>(gen() % 200))));
  }
  for (int i = 0; i < 1000; ++i) xs.push_back(Qd(std::round(708.0 * unit(gen) * 8.0) / 8.0));
  for (int i = 0; i < 1000; ++i) xs.push_back(Qd(708.0 * unit(gen)));
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (double edge :
       {0.0,    -0.0,  1.0,    -1.0,   0.5,   -709.0, 709.0, -708.999, 708.999, -745.0, -746.0,
        -746.5, 709.5, 709.78, 709.79, 710.0, -1e308, 1e308, inf,      -inf,    nan}) {
    xs.push_back(Qd(edge));
  }
  xs.push_back(plus(1.0, 0x1p-60));                // 1 with a tail: not QD's exact-one case
  xs.push_back(Qd(qd_real(-2.5, nan, 0.0, 0.0)));  // a finite lead with a non-finite tail
  xs.push_back(Qd(qd_real(-2.5, 1e-17, inf, 0.0)));
  return xs;
}

bool same_bits(const Qd& a, const Qd& b) { return std::memcmp(&a, &b, sizeof a) == 0; }

}  // namespace

TEST_CASE("exp_each gives QD's exp bit for bit for every argument, under each instruction set",
          "[qd][exp]") {
  const std::vector<Qd> xs = arguments();
  std::vector<Qd> expected;
  for (const Qd& x : xs) expected.push_back(exp(x));
  lane_test::EachIsa isas;
  for (const LaneIsa isa : isas.all()) {
    set_lane_isa(isa);
    INFO("instruction set " << (isa == LaneIsa::avx2 ? "avx2" : "sse2"));
    // The lanes pass their self-check against this libqd, so the comparison below tests them
    // (not the scalar fallback).
    REQUIRE(exp_each_uses_lanes());
    std::vector<Qd> got = xs;
    exp_each(got.data(), static_cast<std::int64_t>(got.size()));
    std::size_t differing = 0;
    for (std::size_t i = 0; i < xs.size(); ++i) {
      if (!same_bits(got[i], expected[i])) {
        ++differing;
        UNSCOPED_INFO("argument " << i << ": lead " << xs[i].term(0));
      }
    }
    CHECK(differing == 0);
    // Every group size: the spare lanes of a partial group must not change a result.
    for (std::int64_t n = 0; n <= 9; ++n) {
      std::vector<Qd> prefix(xs.begin() + 100, xs.begin() + 100 + n);
      exp_each(prefix.data(), n);
      for (std::int64_t i = 0; i < n; ++i) {
        CHECK(same_bits(prefix[static_cast<std::size_t>(i)],
                        expected[static_cast<std::size_t>(100 + i)]));
      }
    }
  }
}

TEST_CASE("QD's exp coefficients are 1/n! for n = 3 to 11 to qd precision", "[qd][exp]") {
  // 1/n! in MPFR at 600 bits against the table's four terms summed exactly (MPFR, 600 bits
  // hold them: they span less than 300 bits). QD's table is accurate to its 212 bits.
  mpfr_t exact, table, term;
  mpfr_inits2(600, exact, table, term, static_cast<mpfr_ptr>(nullptr));
  for (int n = 3; n <= 11; ++n) {
    mpfr_set_ui(exact, 1, MPFR_RNDN);
    for (int k = 2; k <= n; ++k)
      mpfr_div_ui(exact, exact, static_cast<unsigned long>(k), MPFR_RNDN);
    const qd_real& c = detail::kExpInverseFactorial[n - 3];
    mpfr_set_zero(table, 1);
    for (int t = 0; t < 4; ++t) {
      REQUIRE(mpfr_set_d(term, c.x[t], MPFR_RNDN) == 0);
      REQUIRE(mpfr_add(table, table, term, MPFR_RNDN) == 0);  // exact
    }
    mpfr_sub(table, table, exact, MPFR_RNDN);
    mpfr_div(table, table, exact, MPFR_RNDN);
    INFO("n = " << n);
    CHECK(std::fabs(mpfr_get_d(table, MPFR_RNDN)) < 0x1p-208);
  }
  mpfr_clears(exact, table, term, static_cast<mpfr_ptr>(nullptr));
}
