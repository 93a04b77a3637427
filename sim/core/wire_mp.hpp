// WireValues<Mp> (wire.hpp): an Mp value travels exactly. Per value: its precision in bits, a
// class byte (0 zero, 1 regular, 2 inf, 3 nan), the sign, and for a regular value the exponent e
// and the magnitude bytes of the integer significand z with |x| = z * 2^e (mpfr_get_z_2exp), so
// the receiver rebuilds bitwise the same value at the same precision (mpfr_set_z_2exp is exact
// when z fits the precision, which it does: it came from a value of that precision).
#pragma once

#include <vector>

#include "core/mp.hpp"
#include "core/wire.hpp"

namespace shardsim {

template <>
struct WireValues<Mp> {
  static void put(WireWriter& w, const std::vector<Mp>& values);
  static std::vector<Mp> get(WireReader& r);
};

}  // namespace shardsim
