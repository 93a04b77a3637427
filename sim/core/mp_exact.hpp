// Exact text for multiprecision values, so that values captured at one mp precision can be
// compared later at another (shardsim precision) without any rounding in between.
//
// The text is MPFR's "%Ra" form: a hexadecimal significand with a binary exponent, e.g.
// "0x1.8p+0" = 1.5, "-0x1p-3" = -0.125, "0" and "-0" for zeros, "inf", "-inf", "nan". It is
// exact (every bit of the significand is written) and parses back exactly at any precision that
// holds the value's bits.
#pragma once

#include <string>
#include <utility>

#include "core/mp.hpp"
#include "core/magnitude.hpp"

namespace shardsim {

std::string mp_exact_text(const Mp& value);

// `value` in decimal scientific notation with `digits` significant digits, correctly rounded
// (MPFR's "%.*Re"), e.g. mp_decimal_text(1.5, 3) = "1.50e+00".
std::string mp_decimal_text(const Mp& value, int digits);

// Both values in decimal with the fewest significant digits (at least 17) at which their texts
// differ, so that two mp values that round to the same double still print differently. Values
// that are equal (or NaN) print with 17 digits. Values equal at 17 digits are searched from a
// few digits before log10(max(|a|, |b|) / |a - b|), where they start to differ (a rounding
// boundary between them could make them differ earlier, by chance; that is skipped).
std::pair<std::string, std::string> distinguishing_texts(const Mp& a, const Mp& b);

// |value| rounded once to 53 bits (round to nearest) with an unbounded exponent: a gap of 2^-2048
// at mp2048 stays 2^-2048, where a double reads 0. NaN and infinities map to Magnitude's.
Magnitude mp_magnitude(const Mp& value);
Magnitude mp_magnitude(mpfr_srcptr value);  // the same for a raw MPFR value
// |a - b|: the difference rounded once to the wider operand's precision (as the kernels'
// subtraction at a run's precision), then as mp_magnitude. Allocates nothing per call.
Magnitude mp_abs_difference(const Mp& a, const Mp& b);

}  // namespace shardsim
