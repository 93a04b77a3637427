#include "core/qd_exact.hpp"

#include <mpfr.h>

#include <algorithm>
#include <climits>

#include "core/error.hpp"

namespace shardsim {

namespace {

// The exact sum of the terms in an MPFR value wide enough for all of them.
class ExactSum {
 public:
  template <typename R>
  explicit ExactSum(const Expansion<R>& v) {
    int top = INT_MIN, bottom = INT_MAX;
    for (int i = 0; i < Expansion<R>::kTerms; ++i) {
      const double t = v.term(i);
      if (t == 0 || !std::isfinite(t)) continue;
      top = std::max(top, std::ilogb(t));
      bottom = std::min(bottom, std::ilogb(t) - 52);
    }
    const long bits = top == INT_MIN ? 53 : std::max(53L, static_cast<long>(top) - bottom + 2);
    mpfr_init2(value_, bits);
    mpfr_set_d(value_, v.term(0), MPFR_RNDN);
    for (int i = 1; i < Expansion<R>::kTerms && mpfr_number_p(value_); ++i) {
      mpfr_add_d(value_, value_, v.term(i), MPFR_RNDN);  // exact: the precision spans them all
    }
  }
  ~ExactSum() { mpfr_clear(value_); }
  ExactSum(const ExactSum&) = delete;
  ExactSum& operator=(const ExactSum&) = delete;
  mpfr_srcptr get() const { return value_; }

 private:
  mpfr_t value_;
};

std::string format_text(const char* format, int digits, mpfr_srcptr value) {
  char* text = nullptr;
  const int length = digits < 0 ? mpfr_asprintf(&text, format, value)
                                 : mpfr_asprintf(&text, format, digits, value);
  SHARDSIM_ASSERT(length >= 0 && text != nullptr, "mpfr_asprintf failed");
  std::string out(text, static_cast<std::size_t>(length));
  mpfr_free_str(text);
  return out;
}

}  // namespace

template <typename R>
std::string expansion_exact_text(const Expansion<R>& value) {
  const ExactSum sum(value);
  return format_text("%Ra", -1, sum.get());
}

template <typename R>
std::pair<std::string, std::string> expansion_distinguishing_texts(const Expansion<R>& a,
                                                                   const Expansion<R>& b) {
  const ExactSum x(a), y(b);
  const int most = static_cast<int>(Expansion<R>::kBits * 0.30103) + 2;
  std::pair<std::string, std::string> out;
  for (int digits = 17; digits <= most; ++digits) {
    out = {format_text("%.*Re", digits - 1, x.get()), format_text("%.*Re", digits - 1, y.get())};
    if (out.first != out.second || a == b || isnan(a) || isnan(b)) break;
  }
  return out;
}

template <typename R>
Magnitude expansion_magnitude(const Expansion<R>& value) {
  if (isnan(value)) return Magnitude::nan();
  if (isinf(value)) return Magnitude::infinity();
  return Magnitude::of(std::fabs(round_to_f64(value)));
}

template <typename R>
Magnitude expansion_abs_difference(const Expansion<R>& a, const Expansion<R>& b) {
  return expansion_magnitude(Expansion<R>(a - b));
}

template <>
int golden_error_budget_log2<qd_real>() {
  return -150;
}
template <>
int golden_error_budget_log2<dd_real>() {
  return -76;
}

template <typename R>
std::uint8_t near_midpoint_flags(const Expansion<R>& value) {
  const double lead = value.term(0);
  if (lead == 0 || !std::isfinite(lead)) return 0;
  const Expansion<R> delta(std::ldexp(std::fabs(lead), golden_error_budget_log2<R>()));
  const Expansion<R> low = value - delta;
  const Expansion<R> high = value + delta;
  std::uint8_t flags = 0;
  if (round_to_f64(low) != round_to_f64(high)) flags |= kNearF64;
  if (round_to_f32(low) != round_to_f32(high)) flags |= kNearF32;
  if (round_to_narrow(low, NarrowFormat::bf16) != round_to_narrow(high, NarrowFormat::bf16)) {
    flags |= kNearBf16;
  }
  if (round_to_narrow(low, NarrowFormat::f16) != round_to_narrow(high, NarrowFormat::f16)) {
    flags |= kNearF16;
  }
  return flags;
}

#define SHARDSIM_INSTANTIATE_EXPANSION_EXACT(R)                                          \
  template std::string expansion_exact_text(const Expansion<R>&);                        \
  template std::pair<std::string, std::string> expansion_distinguishing_texts(           \
      const Expansion<R>&, const Expansion<R>&);                                         \
  template Magnitude expansion_magnitude(const Expansion<R>&);                           \
  template Magnitude expansion_abs_difference(const Expansion<R>&, const Expansion<R>&); \
  template std::uint8_t near_midpoint_flags(const Expansion<R>&);

SHARDSIM_INSTANTIATE_EXPANSION_EXACT(dd_real)
SHARDSIM_INSTANTIATE_EXPANSION_EXACT(qd_real)

}  // namespace shardsim
