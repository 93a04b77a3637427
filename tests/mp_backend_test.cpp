// Tests for mp_backend.hpp: Mp over shardsim's 56-byte MpBackend gives the bits Boost's own
// mpfr_float_backend<0> gives, operation by operation, and allocates nothing up to 320 bits.
//
// The reference is Boost's backend itself (what Mp was before the compact storage): both front ends
// run the same expression on the same operands and the results must be the same MPFR number (value,
// sign of zero, NaN-ness and precision). Operands are chosen to reach the paths that differ in
// sign or rounding: exact zeros of both signs with integer operands (Boost's add_ui/sub_ui choice),
// NaN and infinities, values that are not representable at the precision, and mixed precisions
// (the result takes the widest).
#include <boost/multiprecision/mpfr.hpp>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "core/mp.hpp"
#include "core/mp_arena.hpp"

using shardsim::Mp;
using Ref = boost::multiprecision::number<boost::multiprecision::mpfr_float_backend<0>,
                                          boost::multiprecision::et_off>;

namespace {

// The same number: precision, class, sign and value.
bool same(const Mp& a, const Ref& b) {
  const auto x = a.backend().data();
  mpfr_srcptr y = b.backend().data();
  if (mpfr_get_prec(x.get()) != mpfr_get_prec(y)) return false;
  if (mpfr_nan_p(x.get()) || mpfr_nan_p(y)) return mpfr_nan_p(x.get()) && mpfr_nan_p(y);
  return mpfr_equal_p(x, y) && mpfr_signbit(x.get()) == mpfr_signbit(y);
}

Ref to_ref(const Mp& a) {
  Ref r;
  const auto source = a.backend().data();  // named: mpfr_set keeps its source past a temporary
  mpfr_set_prec(r.backend().data(), mpfr_get_prec(source.get()));
  mpfr_set(r.backend().data(), source.get(), MPFR_RNDN);
  return r;
}

// Operands: signed zeros, NaN, infinities, 1/3, -2/7, 3, 1e-300, 2^70 + 1, at the default
// precision.
std::vector<Mp> operands() {
  std::vector<Mp> v = {
      Mp(0),      -Mp(0),  Mp(1) / 3, Mp(-2) / 7, Mp(3),
      Mp(1e-300), Mp(0.5), Mp(-1),    Mp(2),      std::numeric_limits<Mp>::infinity()};
  v.push_back(-std::numeric_limits<Mp>::infinity());
  v.push_back(std::numeric_limits<Mp>::quiet_NaN());
  v.push_back(ldexp(Mp(1), 70) + 1);
  return v;
}

// Returns the bits carried (set_mp_precision rounds up to Boost's digits10 steps).
unsigned set_both_precisions(unsigned digits10_bits) {
  const unsigned bits = shardsim::set_mp_precision(digits10_bits);
  unsigned digits10 = 1;
  while (boost::multiprecision::detail::digits10_2_2(digits10) < bits) ++digits10;
  Ref::thread_default_precision(digits10);
  Ref::default_precision(digits10);
  return bits;
}

}  // namespace

TEST_CASE("mp backend: an Mp value is 56 bytes and has mp256's 257 bits inline", "[mp_backend]") {
  shardsim::set_mp_precision(256);
  CHECK(sizeof(Mp) == 56);
  CHECK(Mp(1).backend().precision_bits() == 257);
  // Making and dropping 50000 mp256 values on a fresh thread takes no block from the pools (when
  // they are installed; under ASan they are not, and nothing is counted).
  shardsim::install_mp_arena();
  const std::int64_t before = shardsim::mp_arena_chunk_bytes();
  bool right = true;
  std::thread worker([&] {
    shardsim::set_mp_precision(256);
    std::vector<Mp> values;
    for (int i = 0; i < 50000; ++i) values.push_back(Mp(i) / 7);
    right = values[49999] * 7 == Mp(49999);
  });
  worker.join();
  CHECK(right);
  CHECK(shardsim::mp_arena_chunk_bytes() == before);
}

TEST_CASE("mp backend: binary operations give Boost's mpfr backend's bits", "[mp_backend]") {
  for (unsigned bits : {64u, 256u, 1000u}) {  // 1000: limbs in a block
    set_both_precisions(bits);
    const std::vector<Mp> xs = operands();
    int mismatches = 0;
    for (const Mp& a : xs) {
      const Ref ra = to_ref(a);
      for (const Mp& b : xs) {
        const Ref rb = to_ref(b);
        mismatches += !same(a + b, ra + rb) + !same(a - b, ra - rb);
        mismatches += !same(a * b, ra * rb) + !same(a / b, ra / rb);
        mismatches += !same(pow(a, b), pow(ra, rb)) + !same(atan2(a, b), atan2(ra, rb));
        mismatches += !same(fma(a, b, a), fma(ra, rb, ra));
        mismatches += (a < b) != (ra < rb) || (a == b) != (ra == rb) || (a > b) != (ra > rb);
        mismatches += (a <= b) != (ra <= rb) || (a != b) != (ra != rb);
      }
      // Integer operands: 0 takes add_ui or sub_ui by position, which differ on -0.
      for (long i : {0L, 1L, -1L, 3L, -7L}) {
        mismatches += !same(a + i, ra + i) + !same(i + a, i + ra) + !same(a - i, ra - i);
        mismatches += !same(i - a, i - ra) + !same(a * i, ra * i) + !same(i * a, i * ra);
        mismatches += !same(a / i, ra / i) + !same(i / a, i / ra);
        Mp c = a;
        Ref rc = ra;
        c += i;
        rc += i;
        mismatches += !same(c, rc);
        c -= i;
        rc -= i;
        mismatches += !same(c, rc);
        c *= i;
        rc *= i;
        mismatches += !same(c, rc);
        c /= i;
        rc /= i;
        mismatches += !same(c, rc);
        mismatches += (a < i) != (ra < i) || (a == i) != (ra == i);
        mismatches += !same(pow(a, i), pow(ra, i));
      }
      Mp self = a;
      Ref rself = ra;
      self *= self;  // aliased: squares
      rself *= rself;
      mismatches += !same(self, rself);
      self -= self;  // aliased: +0 (or NaN)
      rself -= rself;
      mismatches += !same(self, rself);
    }
    CHECK(mismatches == 0);
  }
  set_both_precisions(256);
}

TEST_CASE("mp backend: functions and conversions give Boost's mpfr backend's results",
          "[mp_backend]") {
  set_both_precisions(256);
  int mismatches = 0;
  for (const Mp& a : operands()) {
    const Ref r = to_ref(a);
    mismatches += !same(-a, -r) + !same(abs(a), abs(r)) + !same(sqrt(a), sqrt(r));
    mismatches += !same(exp(a), exp(r)) + !same(log(a), log(r)) + !same(log2(a), log2(r));
    mismatches += !same(log10(a), log10(r)) + !same(exp2(a), exp2(r));
    mismatches += !same(sin(a), sin(r)) + !same(cos(a), cos(r)) + !same(tan(a), tan(r));
    mismatches += !same(tanh(a), tanh(r)) + !same(sinh(a), sinh(r)) + !same(cosh(a), cosh(r));
    mismatches += !same(atan(a), atan(r)) + !same(asin(a), asin(r)) + !same(acos(a), acos(r));
    mismatches += !same(erf(a), erf(r)) + !same(erfc(a), erfc(r));
    mismatches += !same(expm1(a), expm1(r)) + !same(log1p(a), log1p(r));
    mismatches += !same(floor(a), floor(r)) + !same(ceil(a), ceil(r)) + !same(trunc(a), trunc(r));
    mismatches += !same(ldexp(a, 5), ldexp(r, 5)) + !same(ldexp(a, -9), ldexp(r, -9));
    int ea = 0;
    int er = 0;
    mismatches += !same(frexp(a, &ea), frexp(r, &er)) + (ea != er);
    mismatches += isnan(a) != isnan(r) || isinf(a) != isinf(r) || signbit(a) != signbit(r);
    mismatches += fpclassify(a) != fpclassify(r);
    const double d = static_cast<double>(a);
    const double dr = static_cast<double>(r);
    const float f = static_cast<float>(a);
    const float fr = static_cast<float>(r);
    mismatches += std::memcmp(&d, &dr, sizeof d) != 0 || std::memcmp(&f, &fr, sizeof f) != 0;
    if (!isnan(a) && !isinf(a)) mismatches += static_cast<long>(a) != static_cast<long>(r);
  }
  // Built-in values in: doubles (exact), integers, decimal text (rounded at the precision).
  mismatches +=
      !same(Mp(0.1), Ref(0.1)) + !same(Mp(-7), Ref(-7)) + !same(Mp(1ull << 63), Ref(1ull << 63));
  mismatches += !same(Mp("0.1"), Ref("0.1"));
  CHECK(mismatches == 0);
  CHECK_THROWS_AS(Mp("not a number"), std::runtime_error);
  CHECK(isinf(std::numeric_limits<Mp>::infinity()));
  CHECK(std::numeric_limits<Mp>::infinity() > 0);
  CHECK(isnan(std::numeric_limits<Mp>::quiet_NaN()));
  CHECK(same(std::numeric_limits<Mp>::epsilon(), std::numeric_limits<Ref>::epsilon()));
}

TEST_CASE("mp backend: a result takes the widest of the default and its operands' precisions",
          "[mp_backend]") {
  // Boost's rule for mpfr_float (preserve_related_precision): made at 128 bits, then the default
  // raised to 1000 (Boost's digits10 steps carry 130 and 1001 bits): the sum of a narrow and a wide
  // value is as wide as the wide one, and a copy keeps its source's precision; an assignment from
  // a double keeps the target's.
  const long narrow_bits = set_both_precisions(128);
  const Mp narrow = Mp(1) / 3;
  const Ref rnarrow = Ref(1) / 3;
  const long wide_bits = set_both_precisions(1000);
  REQUIRE(narrow_bits < 192);  // 3 limbs at most: inline
  REQUIRE(wide_bits > 320);    // a block
  const Mp wide = Mp(1) / 7;
  const Ref rwide = Ref(1) / 7;
  CHECK(same(narrow + wide, rnarrow + rwide));
  CHECK((narrow + wide).backend().precision_bits() == wide_bits);
  CHECK(same(narrow * narrow, rnarrow * rnarrow));
  CHECK(same(sqrt(narrow), sqrt(rnarrow)));
  Mp copy = narrow;
  CHECK(copy.backend().precision_bits() == narrow_bits);
  copy = 0.25;
  CHECK(copy.backend().precision_bits() == narrow_bits);
  Mp assigned = wide;
  assigned = narrow;  // from 16 limbs in a block to 2 inline
  CHECK(same(assigned, rnarrow));
  set_both_precisions(256);
}

TEST_CASE("mp backend: moves, swaps and copies keep values at every width", "[mp_backend]") {
  for (unsigned bits : {64u, 256u, 4096u}) {
    shardsim::set_mp_precision(bits);
    std::vector<Mp> values;
    for (int i = 0; i < 100; ++i) values.push_back(Mp(i) / 3);  // grows: moves every value
    std::vector<Mp> copies = values;
    std::swap(copies[1], copies[2]);
    bool right = copies[1] == Mp(2) / 3 && copies[2] == Mp(1) / 3;
    for (int i = 3; i < 100; ++i) right &= copies[static_cast<std::size_t>(i)] * 3 == Mp(i);
    Mp moved = std::move(copies[50]);
    right &= moved * 3 == Mp(50);
    copies[50] = moved;  // a moved-from value takes a new one
    right &= copies[50] == moved;
    CHECK(right);
  }
  shardsim::set_mp_precision(256);
}
