// Exact comparisons of captured multiprecision values (precision_diff.hpp, namespace detail), in
// their own translation unit (invariant 6, README "Invariants"). Works on raw MPFR numbers so that each
// value keeps its own precision.
#include <cmath>
#include <limits>
#include <mpfr.h>

#include "shardsim/error.hpp"
#include "shardsim/precision/precision_diff.hpp"

namespace shardsim::detail {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// An mpfr_t that cleans up after itself.
class MpfrValue {
 public:
  explicit MpfrValue(unsigned bits) { mpfr_init2(value_, static_cast<mpfr_prec_t>(bits)); }
  ~MpfrValue() { mpfr_clear(value_); }
  MpfrValue(const MpfrValue&) = delete;
  MpfrValue& operator=(const MpfrValue&) = delete;
  mpfr_ptr get() { return value_; }

 private:
  mpfr_t value_;
};

// Reads an exact "%Ra" text. REQUIRES: `out` has enough bits to hold it (the writer's).
void read_exact(mpfr_ptr out, const std::string& text) {
  const int status = mpfr_set_str(out, text.c_str(), 0, MPFR_RNDN);
  SHARDSIM_ASSERT(status == 0, "captured mp text does not parse");
}

}  // namespace

LevelMetrics mp_level_error(const std::vector<std::string>& level,
                            const std::vector<std::string>& top, unsigned level_bits,
                            unsigned top_bits) {
  SHARDSIM_ASSERT(level.size() == top.size(), "level and top sizes differ");
  LevelMetrics out;
  MpfrValue l(level_bits), t(top_bits), r(level_bits), diff(2 * top_bits);
  for (std::size_t i = 0; i < level.size(); ++i) {
    read_exact(l.get(), level[i]);
    read_exact(t.get(), top[i]);
    mpfr_set(r.get(), t.get(), MPFR_RNDN);  // the top value rounded once to the level's bits
    if (mpfr_nan_p(l.get()) || mpfr_nan_p(r.get())) {
      out.max_abs = out.max_rel = out.max_ulp = kInf;
      continue;
    }
    if (mpfr_inf_p(l.get()) || mpfr_inf_p(r.get())) {
      if (!mpfr_equal_p(l.get(), r.get())) out.max_abs = out.max_rel = out.max_ulp = kInf;
      continue;
    }
    mpfr_sub(diff.get(), l.get(), r.get(), MPFR_RNDN);  // exact: 2 * top_bits suffice
    mpfr_abs(diff.get(), diff.get(), MPFR_RNDN);
    if (mpfr_zero_p(diff.get())) continue;
    out.max_abs = std::max(out.max_abs, mpfr_get_d(diff.get(), MPFR_RNDN));
    if (mpfr_zero_p(r.get())) {
      out.max_rel = out.max_ulp = kInf;
      continue;
    }
    MpfrValue scaled(2 * top_bits);
    mpfr_div(scaled.get(), diff.get(), r.get(), MPFR_RNDN);
    out.max_rel = std::max(out.max_rel, std::fabs(mpfr_get_d(scaled.get(), MPFR_RNDN)));
    // ulp(r) = 2^(exponent(r) - bits), with MPFR's exponent convention 0.5 <= |m| < 1.
    const long shift = static_cast<long>(level_bits) - static_cast<long>(mpfr_get_exp(r.get()));
    mpfr_mul_2si(scaled.get(), diff.get(), shift, MPFR_RNDN);
    out.max_ulp = std::max(out.max_ulp, mpfr_get_d(scaled.get(), MPFR_RNDN));
  }
  return out;
}

double mp_abs_gap(const std::vector<const std::string*>& addends, const std::string& dense,
                  unsigned bits) {
  // Texts hold at most `bits` significand bits; read them with room to spare.
  const unsigned wide = bits + 64;
  MpfrValue sum(bits), addend(wide), d(wide), diff(2 * wide);
  mpfr_set_zero(sum.get(), 1);
  for (std::size_t i = 0; i < addends.size(); ++i) {
    read_exact(addend.get(), *addends[i]);
    if (i == 0) {
      mpfr_set(sum.get(), addend.get(), MPFR_RNDN);
    } else {
      mpfr_add(sum.get(), sum.get(), addend.get(), MPFR_RNDN);
    }
  }
  read_exact(d.get(), dense);
  if (mpfr_nan_p(sum.get()) || mpfr_nan_p(d.get())) return kInf;
  if (mpfr_inf_p(sum.get()) || mpfr_inf_p(d.get())) return mpfr_equal_p(sum.get(), d.get()) ? 0.0 : kInf;
  mpfr_sub(diff.get(), sum.get(), d.get(), MPFR_RNDN);
  return std::fabs(mpfr_get_d(diff.get(), MPFR_RNDN));
}

}  // namespace shardsim::detail
