// Exact text for multiprecision values, so that values captured at one mp precision can be
// compared later at another (shardsim precision) without any rounding in between.
//
// The text is MPFR's "%Ra" form: a hexadecimal significand with a binary exponent, e.g.
// "0x1.8p+0" = 1.5, "-0x1p-3" = -0.125, "0" and "-0" for zeros, "inf", "-inf", "nan". It is
// exact (every bit of the significand is written) and parses back exactly at any precision that
// holds the value's bits.
#pragma once

#include <string>

#include "shardsim/mp.hpp"

namespace shardsim {

std::string mp_exact_text(const Mp& value);

}  // namespace shardsim
