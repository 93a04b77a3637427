// Counter-based randomness: Philox4x32-10 (Salmon et al., "Parallel Random Numbers: As Easy as
// 1, 2, 3", SC'11; Random123). A random word is a pure function of (counter, key), so every
// element's randomness can be derived from its global identity, independent of sharding.
//
// Seeded tensor initialization (used for scenario inputs and parameters) is defined here too:
//   key     = (low 32 bits of seed, high 32 bits of seed)
//   counter = (i mod 2^32, i >> 32, stream, 0) for element i of the flat global tensor
//   u       = (out[0] >> 8) * 2^-24                         uniform in [0, 1), 24 bits
//   uniform: value = min(float(low + (high - low) * u), largest float < high)
//   normal : Box-Muller on u1 = 1 - u (in (0,1]) and u2 = (out[1] >> 8) * 2^-24:
//            value = float(mean + std * sqrt(-2 ln u1) * cos(2 pi u2))
// Values are rounded to float once, so every precision starts from identical inputs: a
// precision diff then measures only arithmetic, never different initial data.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace shardsim {

using PhiloxCounter = std::array<std::uint32_t, 4>;
using PhiloxKey = std::array<std::uint32_t, 2>;

// Ten rounds of Philox4x32 with the Random123 multipliers and Weyl constants.
PhiloxCounter philox4x32_10(PhiloxCounter counter, PhiloxKey key);

// FNV-1a 64-bit of a name: derives per-tensor seeds from the scenario seed.
std::uint64_t fnv1a64(std::string_view text);

// `file`: the values are read from a tensor file (scenario: init = { file, tensor }); they are
// not drawn, and init_value is not defined for them.
enum class InitDist { uniform, normal, constant, file };

struct InitSpec {
  InitDist dist = InitDist::uniform;
  double low = -1.0;
  double high = 1.0;
  double mean = 0.0;
  double stddev = 1.0;
  double value = 0.0;
  // dist == file: every element, row-major, exactly as the file holds it (F32, BF16 and F16
  // values are exact doubles; F64 values are themselves), and where they came from.
  std::shared_ptr<const std::vector<double>> values;
  std::string file;         // the path as the scenario writes it
  std::string file_tensor;  // the tensor's name in a safetensors file ("" for .npy)
  std::string file_dtype;   // "F64", "F32", "BF16" or "F16"
  std::string file_sha256;  // SHA-256 of the whole file's bytes
  std::vector<std::int64_t> file_shape;  // as the file states it (the loader checks it)
};

// Element `index` of a tensor initialized with `spec` from `seed` (see the header comment).
// REQUIRES: spec.dist != InitDist::file.
float init_value(const InitSpec& spec, std::uint64_t seed, std::uint64_t index);

// Stream ids used in the Philox counter's third word.
inline constexpr std::uint32_t kInitStream = 0x494e4954;  // "INIT"

// ---------------------------------------------------------------------------------------------
// Dropout masks (README "Dropout randomness" is the same text for backends).
//
// The keep/drop decision of one element is a pure function of (seed, stream, forward pass,
// element index, p):
//   key       = (seed mod 2^32, seed >> 32)
//   counter   = (index mod 2^32, index >> 32, stream, forward_pass)
//   forward_pass is the 1-based count of the site's forward passes: the training step, or with
//   [stream] of C chunks (training step - 1) * C + chunk, so every pass draws fresh masks
//   word      = out[0] of philox4x32_10(counter, key)
//   threshold = floor(p * 2^32)     (p * 2^32 is exact in double; 0 <= threshold < 2^32)
//   keep      iff word >= threshold, so an element is dropped with probability threshold / 2^32
// The counter never collides with initialization's (its fourth word is 0, a forward pass >= 1).
//
// Which seed and which index a rank uses is the policy:
//   global       seed, and the element's flat index in the tensor's GLOBAL shape (row-major,
//                outermost axis first). Every rank's mask is the slice of the dense mask.
//   same_seed    seed, and the element's flat index in the rank's LOCAL tensor. Ranks holding
//                equally shaped shards draw identical masks (the seed-repetition bug).
//   rank_offset  seed + 2718 + rank (mod 2^64; Megatron's tensor-parallel seed offset), and the
//                local flat index. Masks differ across ranks but are not the dense mask.
// Padding positions (padded split) are never drawn: they are always dropped.
enum class DropoutPolicy { global, same_seed, rank_offset };
std::string_view dropout_policy_name(DropoutPolicy policy);
// "global", "same_seed" or "rank_offset"; throws InputError otherwise.
DropoutPolicy parse_dropout_policy(std::string_view text);

inline constexpr std::uint64_t kRankOffsetSeedOffset = 2718;

// floor(p * 2^32). REQUIRES: 0 <= p < 1.
std::uint32_t dropout_threshold(double p);
// The seed rank `rank` keys Philox with under `policy`.
std::uint64_t dropout_rank_seed(DropoutPolicy policy, std::uint64_t seed, int rank);
// out[0] of Philox for element `index` (see above).
std::uint32_t dropout_word(std::uint64_t seed, std::uint32_t stream, std::uint32_t forward_pass,
                           std::uint64_t index);
inline bool dropout_keep(std::uint32_t word, std::uint32_t threshold) { return word >= threshold; }

// The repetition detector. It is part of the checker, like the replica check: it reads every
// rank's keep/drop mask, which no rank program does.
//
// For each pair of ranks a < b it compares the masks position by position over the overlapping
// local flat index range [0, min(n_a, n_b)), skipping positions that are padding on either rank.
// Independent masks agree at a position with probability chance = q^2 + (1 - q)^2, where
// q = threshold / 2^32 is the exact drop probability. The pair is flagged as repeated when the
// binomial upper tail P(Binomial(positions, chance) >= agree) is below kRepetitionTail = 1e-9:
// independent masks would agree that often less than once in a billion pairs, while one repeated
// 32-position mask at p = 0.5 already has tail 2^-32. (A z-score understates such small-sample
// tails: 32 agreeing positions of 32 at p = 0.5 are z = 5.7 but probability 2^-32.)
// With threshold = 0 (p = 0) nothing is random, chance = 1, and no pair is flagged.
inline constexpr double kRepetitionTail = 1e-9;

struct MaskAgreement {
  int rank_a = 0;
  int rank_b = 0;
  std::int64_t positions = 0;  // compared positions
  std::int64_t agree = 0;      // positions where both keep or both drop
  double chance = 1;           // agreement probability of independent masks
  double tail = 1;             // P(Binomial(positions, chance) >= agree)
  bool repeated = false;       // tail < kRepetitionTail

  // "ranks 0,1: 128 of 128 positions agree (1.000) vs 0.500 by chance, tail 2.9e-39: REPEATED"
  std::string str() const;
};

// keeps[r][i] is rank r's decision at local flat position i (1 keep, 0 drop); valid[r][i] is 0 on
// padding. Returns the pairs in order (0,1), (0,2), ..., (1,2), ...
// REQUIRES: valid[r].size() == keeps[r].size() for every r.
std::vector<MaskAgreement> mask_agreement(const std::vector<std::vector<std::uint8_t>>& keeps,
                                          const std::vector<std::vector<std::uint8_t>>& valid,
                                          std::uint32_t threshold);

// P(Binomial(n, prob) >= k), summed in log space from j = k up to n. REQUIRES: 0 <= prob <= 1.
double binomial_upper_tail(std::int64_t n, std::int64_t k, double prob);

}  // namespace shardsim
