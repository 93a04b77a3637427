// Counter-based randomness: Philox4x32-10 (Salmon et al., "Parallel Random Numbers: As Easy as
// 1, 2, 3", SC'11; Random123). A random word is a pure function of (counter, key), so every
// element's randomness can be derived from its global identity, independent of sharding.
//
// Seeded tensor initialization (used for scenario inputs and parameters) is defined here too:
//   key     = (low 32 bits of seed, high 32 bits of seed)
//   counter = (i mod 2^32, i >> 32, stream, 0) for element i of the flat global tensor
//   u       = (out[0] >> 8) * 2^-24                         uniform in [0, 1), 24 bits
//   uniform: value = float(low + (high - low) * u)
//   normal : Box-Muller on u1 = 1 - u (in (0,1]) and u2 = (out[1] >> 8) * 2^-24:
//            value = float(mean + std * sqrt(-2 ln u1) * cos(2 pi u2))
// Values are rounded to float once, so every precision starts from identical inputs: a
// precision diff then measures only arithmetic, never different initial data.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace shardsim {

using PhiloxCounter = std::array<std::uint32_t, 4>;
using PhiloxKey = std::array<std::uint32_t, 2>;

// Ten rounds of Philox4x32 with the Random123 multipliers and Weyl constants.
PhiloxCounter philox4x32_10(PhiloxCounter counter, PhiloxKey key);

// FNV-1a 64-bit of a name: derives per-tensor seeds from the scenario seed.
std::uint64_t fnv1a64(std::string_view text);

enum class InitDist { uniform, normal, constant };

struct InitSpec {
  InitDist dist = InitDist::uniform;
  double low = -1.0;
  double high = 1.0;
  double mean = 0.0;
  double stddev = 1.0;
  double value = 0.0;
};

// Element `index` of a tensor initialized with `spec` from `seed` (see the header comment).
float init_value(const InitSpec& spec, std::uint64_t seed, std::uint64_t index);

// Stream ids used in the Philox counter's third word.
inline constexpr std::uint32_t kInitStream = 0x494e4954;  // "INIT"

}  // namespace shardsim
