#include "shardsim/rng.hpp"

#include <cmath>
#include <numbers>

namespace shardsim {

namespace {

constexpr std::uint32_t kMul0 = 0xD2511F53;
constexpr std::uint32_t kMul1 = 0xCD9E8D57;
constexpr std::uint32_t kWeyl0 = 0x9E3779B9;
constexpr std::uint32_t kWeyl1 = 0xBB67AE85;

void mulhilo(std::uint32_t a, std::uint32_t b, std::uint32_t& hi, std::uint32_t& lo) {
  const std::uint64_t product = static_cast<std::uint64_t>(a) * b;
  hi = static_cast<std::uint32_t>(product >> 32);
  lo = static_cast<std::uint32_t>(product);
}

}  // namespace

PhiloxCounter philox4x32_10(PhiloxCounter ctr, PhiloxKey key) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += kWeyl0;
      key[1] += kWeyl1;
    }
    std::uint32_t hi0, lo0, hi1, lo1;
    mulhilo(kMul0, ctr[0], hi0, lo0);
    mulhilo(kMul1, ctr[2], hi1, lo1);
    ctr = {hi1 ^ ctr[1] ^ key[0], lo1, hi0 ^ ctr[3] ^ key[1], lo0};
  }
  return ctr;
}

std::uint64_t fnv1a64(std::string_view text) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

float init_value(const InitSpec& spec, std::uint64_t seed, std::uint64_t index) {
  if (spec.dist == InitDist::constant) return static_cast<float>(spec.value);
  const PhiloxKey key{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)};
  const PhiloxCounter ctr{static_cast<std::uint32_t>(index),
                          static_cast<std::uint32_t>(index >> 32), kInitStream, 0};
  const PhiloxCounter out = philox4x32_10(ctr, key);
  const double u = std::ldexp(static_cast<double>(out[0] >> 8), -24);
  if (spec.dist == InitDist::uniform) {
    return static_cast<float>(spec.low + (spec.high - spec.low) * u);
  }
  const double u1 = 1.0 - u;
  const double u2 = std::ldexp(static_cast<double>(out[1] >> 8), -24);
  return static_cast<float>(spec.mean + spec.stddev * std::sqrt(-2.0 * std::log(u1)) *
                                            std::cos(2.0 * std::numbers::pi * u2));
}

}  // namespace shardsim
