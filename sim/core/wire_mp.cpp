#include "core/wire_mp.hpp"

#include <gmp.h>

#include <boost/multiprecision/detail/digits.hpp>
#include <string>

namespace shardsim {

namespace {

enum : std::uint64_t { kZero = 0, kRegular = 1, kInf = 2, kNan = 3 };

// The widest precision a value can carry: set_mp_precision(kMaxMpBits) rounds up to Boost's
// decimal-digit steps (mp.hpp); 65536 itself is a step today, but the bound follows the rule.
constexpr std::uint64_t kMaxCarriedBits = [] {
  unsigned long digits10 = 1;
  while (boost::multiprecision::detail::digits10_2_2(digits10) < kMaxMpBits) ++digits10;
  return boost::multiprecision::detail::digits10_2_2(digits10);
}();

void put_one(WireWriter& w, mpfr_srcptr x, mpz_t z) {
  w.u64(static_cast<std::uint64_t>(mpfr_get_prec(x)));
  std::uint64_t kind = kRegular;
  if (mpfr_zero_p(x)) kind = kZero;
  if (mpfr_inf_p(x)) kind = kInf;
  if (mpfr_nan_p(x)) kind = kNan;
  w.u64(kind);
  w.u64(mpfr_signbit(x) ? 1 : 0);
  if (kind != kRegular) return;
  const mpfr_exp_t e = mpfr_get_z_2exp(z, x);
  w.i64(static_cast<std::int64_t>(e));
  std::string magnitude((mpz_sizeinbase(z, 2) + 7) / 8, '\0');
  std::size_t written = 0;
  mpz_export(magnitude.data(), &written, 1, 1, 1, 0, z);  // big-endian bytes of |z|
  magnitude.resize(written);
  w.str(magnitude);
}

void get_one(WireReader& r, Mp& value, mpz_t z) {
  const std::uint64_t prec = r.u64();
  if (prec < MPFR_PREC_MIN || prec > kMaxCarriedBits) throw TransportError("wire: an mp precision");
  value.backend().set_precision(static_cast<mpfr_prec_t>(prec));
  MpfrOut x(value.backend());
  const std::uint64_t kind = r.u64();
  const int sign = r.u64() ? -1 : 1;
  switch (kind) {
    case kZero: mpfr_set_zero(x, sign); return;
    case kInf: mpfr_set_inf(x, sign); return;
    case kNan: mpfr_set_nan(x); return;
    case kRegular: break;
    default: throw TransportError("wire: an mp value's class");
  }
  const std::int64_t e = r.i64();
  const std::string magnitude = r.str();
  mpz_import(z, magnitude.size(), 1, 1, 1, 0, magnitude.data());
  if (sign < 0) mpz_neg(z, z);
  if (mpfr_set_z_2exp(x, z, static_cast<mpfr_exp_t>(e), MPFR_RNDN) != 0) {
    throw TransportError("wire: an mp value did not fit its precision");
  }
}

}  // namespace

void WireValues<Mp>::put(WireWriter& w, const std::vector<Mp>& values) {
  w.u64(values.size());
  mpz_t z;
  mpz_init(z);
  for (const Mp& v : values) put_one(w, v.backend().data(), z);
  mpz_clear(z);
}

std::vector<Mp> WireValues<Mp>::get(WireReader& r) {
  std::vector<Mp> values(r.count(UINT64_MAX));
  mpz_t z;
  mpz_init(z);
  try {
    for (Mp& v : values) get_one(r, v, z);
  } catch (...) {
    mpz_clear(z);
    throw;
  }
  mpz_clear(z);
  return values;
}

}  // namespace shardsim
