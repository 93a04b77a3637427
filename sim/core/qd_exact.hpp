// Exact text, magnitudes and golden-rounding checks for dd and qd values (qd.hpp), the
// counterparts of mp_exact.hpp, so that the comparator, the precision ladder and the goldens
// treat an expansion as they treat an mp value.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "core/magnitude.hpp"
#include "core/qd.hpp"

namespace shardsim {

// The exact sum x0 + x1 (+ x2 + x3) as MPFR's "%Ra" text (see mp_exact.hpp), written with as many
// bits as the terms span, so it reads back exactly (or rounded, when read at fewer bits).
template <typename R>
std::string expansion_exact_text(const Expansion<R>& value);

// Both values in decimal with the fewest significant digits (at least 17) at which their texts
// differ, as distinguishing_texts(Mp, Mp).
template <typename R>
std::pair<std::string, std::string> expansion_distinguishing_texts(const Expansion<R>& a,
                                                                   const Expansion<R>& b);

// |value| and |a - b| (the difference rounded once in the type) rounded once to 53 bits.
template <typename R>
Magnitude expansion_magnitude(const Expansion<R>& value);
template <typename R>
Magnitude expansion_abs_difference(const Expansion<R>& a, const Expansion<R>& b);

// Golden rounding of a dd/qd value can be trusted only away from a rounding midpoint of the
// golden format: the value carries the rounding error of the whole computation that made it. The
// error budget is 2^-150 relative at qd (212 bits, 62 of them headroom for accumulated rounding
// and cancellation) and 2^-76 at dd (106 bits, 30 of headroom): a value is "near a midpoint" of a
// format when v (1 - b) and v (1 + b) round to different values in it. Then a reference that is
// more exact (mp256) could round the other way. The flags are bits of kNearF64 ... kNearF16
// (scalar.hpp).
template <typename R>
int golden_error_budget_log2();  // -150 (qd), -76 (dd)
template <typename R>
std::uint8_t near_midpoint_flags(const Expansion<R>& value);
// The budget of `value`'s type (found by argument-dependent lookup in generic code).
template <typename R>
int golden_error_budget_log2(const Expansion<R>&) {
  return golden_error_budget_log2<R>();
}

}  // namespace shardsim
