#include "core/rng.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numbers>

#include "core/error.hpp"

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
  SHARDSIM_ASSERT(spec.dist != InitDist::file, "init_value: file values are read, not drawn");
  if (spec.dist == InitDist::constant) return static_cast<float>(spec.value);
  const PhiloxKey key{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)};
  const PhiloxCounter ctr{static_cast<std::uint32_t>(index),
                          static_cast<std::uint32_t>(index >> 32), kInitStream, 0};
  const PhiloxCounter out = philox4x32_10(ctr, key);
  const double u = std::ldexp(static_cast<double>(out[0] >> 8), -24);
  if (spec.dist == InitDist::uniform) {
    // Rounding to float can reach `high` when the float spacing near it is coarse; clamp to the
    // largest float below high so the range stays half-open.
    float below_high = static_cast<float>(spec.high);
    if (static_cast<double>(below_high) >= spec.high) {
      below_high = std::nextafter(below_high, -std::numeric_limits<float>::infinity());
    }
    return std::min(static_cast<float>(spec.low + (spec.high - spec.low) * u), below_high);
  }
  const double u1 = 1.0 - u;
  const double u2 = std::ldexp(static_cast<double>(out[1] >> 8), -24);
  return static_cast<float>(spec.mean + spec.stddev * std::sqrt(-2.0 * std::log(u1)) *
                                            std::cos(2.0 * std::numbers::pi * u2));
}

std::int64_t randint_value(std::int64_t low, std::int64_t high, std::uint64_t seed,
                           std::uint64_t index) {
  SHARDSIM_ASSERT(low < high && static_cast<std::uint64_t>(high - low) <= (std::uint64_t{1} << 32),
                  "randint_value: needs low < high and a range of at most 2^32");
  const PhiloxKey key{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)};
  const PhiloxCounter ctr{static_cast<std::uint32_t>(index),
                          static_cast<std::uint32_t>(index >> 32), kInitStream, 0};
  const PhiloxCounter out = philox4x32_10(ctr, key);
  const std::uint64_t word = std::uint64_t{out[0]} | (std::uint64_t{out[1]} << 32);
  return low + static_cast<std::int64_t>(word % static_cast<std::uint64_t>(high - low));
}

std::string_view dropout_policy_name(DropoutPolicy policy) {
  switch (policy) {
    case DropoutPolicy::global: return "global";
    case DropoutPolicy::same_seed: return "same_seed";
    case DropoutPolicy::rank_offset: return "rank_offset";
  }
  return "?";
}

DropoutPolicy parse_dropout_policy(std::string_view text) {
  for (DropoutPolicy policy :
       {DropoutPolicy::global, DropoutPolicy::same_seed, DropoutPolicy::rank_offset}) {
    if (text == dropout_policy_name(policy)) return policy;
  }
  throw InputError("unknown dropout policy '" + std::string(text) +
                   "' (known: global, same_seed, rank_offset)");
}

std::uint32_t dropout_threshold(double p) {
  SHARDSIM_ASSERT(p >= 0 && p < 1, "dropout probability must be in [0, 1)");
  // p * 2^32 is exact (a power-of-two scaling) and below 2^32, so the floor fits.
  return static_cast<std::uint32_t>(std::floor(std::ldexp(p, 32)));
}

std::uint64_t dropout_rank_seed(DropoutPolicy policy, std::uint64_t seed, int rank) {
  if (policy != DropoutPolicy::rank_offset) return seed;
  return seed + kRankOffsetSeedOffset + static_cast<std::uint64_t>(rank);
}

std::uint32_t dropout_word(std::uint64_t seed, std::uint32_t stream, std::uint32_t forward_pass,
                           std::uint64_t index) {
  const PhiloxKey key{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)};
  const PhiloxCounter ctr{static_cast<std::uint32_t>(index),
                          static_cast<std::uint32_t>(index >> 32), stream, forward_pass};
  return philox4x32_10(ctr, key)[0];
}

double binomial_upper_tail(std::int64_t n, std::int64_t k, double prob) {
  SHARDSIM_ASSERT(prob >= 0 && prob <= 1 && n >= 0, "binomial tail needs 0 <= prob <= 1, n >= 0");
  if (k <= 0) return 1;
  if (k > n) return 0;
  if (prob == 1) return 1;
  if (prob == 0) return 0;
  const double log_p = std::log(prob);
  const double log_q = std::log1p(-prob);
  const double log_n_fact = std::lgamma(static_cast<double>(n) + 1);
  auto log_term = [&](std::int64_t j) {
    const double jd = static_cast<double>(j);
    const double rest = static_cast<double>(n - j);
    return log_n_fact - std::lgamma(jd + 1) - std::lgamma(rest + 1) + jd * log_p + rest * log_q;
  };
  double largest = -INFINITY;
  for (std::int64_t j = k; j <= n; ++j) largest = std::max(largest, log_term(j));
  double sum = 0;
  for (std::int64_t j = k; j <= n; ++j) sum += std::exp(log_term(j) - largest);
  return std::min(1.0, std::exp(largest + std::log(sum)));
}

}  // namespace shardsim
