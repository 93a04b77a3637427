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
  std::string file_read;    // the path it was read from: `file` under the scenario's directory
  std::string file_tensor;  // the tensor's name in a safetensors file ("" for .npy)
  std::string file_dtype;   // "F64", "F32", "BF16" or "F16"
  std::string file_sha256;  // SHA-256 of the whole file's bytes
  std::vector<std::int64_t> file_shape;  // as the file states it (the loader checks it)
};

// Element `index` of a tensor initialized with `spec` from `seed` (see the header comment).
// REQUIRES: spec.dist != InitDist::file.
float init_value(const InitSpec& spec, std::uint64_t seed, std::uint64_t index);

// Element `index` of an i64 tensor drawn with init = { dist = "randint", low, high } (token ids,
// labels): uniform on the integers [low, high), torch.randint's range. The init counter above,
// w = out[0] + 2^32 out[1] (64 bits), value = low + (w mod (high - low)). REQUIRES: low < high,
// high - low <= 2^32, so the modulo's bias is below 2^-32.
std::int64_t randint_value(std::int64_t low, std::int64_t high, std::uint64_t seed,
                           std::uint64_t index);

// Stream ids used in the Philox counter's third word.
inline constexpr std::uint32_t kInitStream = 0x494e4954;  // "INIT"

// ---------------------------------------------------------------------------------------------
// Dropout masks (docs/ops/mlp.md "Dropout randomness" is the same text for backends).
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
// rank's drawn words, which no rank program does.
//
// It compares the drawn 32-bit Philox words, not the keep/drop bits. Two independent streams
// share a word at a position with probability 2^-32 whatever p is, so a handful of positions
// decide; keep/drop agreement carries little information when p is small (independent masks
// agree with probability q^2 + (1 - q)^2, 0.98 at p = 0.01) or shards are short.
//
// words[r] is rank r's stream: its drawn words in local flat order, padding skipped, each at its
// local flat index. Each rank's head (its first kRepetitionHeadWords words, all of them when it
// holds fewer) is looked up at every position of every other rank's stream (one hash of the heads,
// so O(total words) time and O(ranks * head) extra memory). Rank b REPEATS rank a at offset s when
// b's head words, at local indices j, equal a's words at local indices j + s (those that land on
// a's padding skipped, at least two compared): offset 0 means the same stream, s > 0 the same
// stream shifted. Without padding that is b's head equal to a's words s, s + 1, .... The pair is
// then compared over the whole overlap (every word of b that lands on a word of a), of which
// `equal` agree. Independent streams would produce such a match somewhere in a's stream with
// probability at most n_a * C(compared, equal) * 2^(-32 equal); the pair is flagged when that bound
// is below kRepetitionTail (two equal words already give about 2^-64 n_a). For each rank b the
// first match is kept (lowest a, then lowest offset).
inline constexpr double kRepetitionTail = 1e-9;
inline constexpr std::size_t kRepetitionHeadWords = 8;

struct StreamRepeat {
  int rank_a = 0;             // the stream that contains ...
  int rank_b = 0;             // ... rank_b's stream, from position `offset` on
  std::int64_t offset = 0;    // 0: the same stream
  std::int64_t compared = 0;  // overlap positions compared
  std::int64_t equal = 0;     // equal words among them
  double log2_chance = 0;     // log2 of the bound above

  // "ranks 0,1: 128 of 128 words equal at offset 0 (chance 2^-4089): REPEATED" (offset 0 names
  // the pair in rank order; otherwise rank_a, then rank_b)
  std::string str() const;
};

// The flagged repetitions, one per repeating rank b, in order of b. at[r] (optional) gives the
// local flat index of each of rank r's words, ascending, where padding positions were skipped
// (empty: word i sits at index i). Heads, offsets and overlaps are then taken over local
// indices, so a stream with padding inside (a short rank of a padded split) is still matched
// word for word against the positions it skipped.
// REQUIRES: words.size() >= 1; at empty or one list per rank, each empty or one index per word.
std::vector<StreamRepeat> repeated_streams(const std::vector<std::vector<std::uint32_t>>& words,
                                           const std::vector<std::vector<std::int64_t>>& at = {});

// P(Binomial(n, prob) >= k), summed in log space from j = k up to n. REQUIRES: 0 <= prob <= 1.
double binomial_upper_tail(std::int64_t n, std::int64_t k, double prob);

}  // namespace shardsim
