// LongAccumulator: an exact sum of products of doubles, as an integer multiple of 2^-2226 in
// base-2^32 digits, rounded greedily to doubles (qd_dot.hpp's exact dot products; carries and
// rounding in sim/core/long_accumulator.cpp).
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>

namespace shardsim {

// The exact sum of products of doubles.
class LongAccumulator {
 public:
  // A finite nonzero double as sign, 53-bit integer significand and exponent: |x| = m 2^(e -
  // 1075), e >= 1 (a subnormal has e = 1 and no implicit bit).
  struct Term {
    std::uint64_t m;
    int e;
    bool negative;
  };
  // Digit k holds bits [32 k, 32 k + 32) of S / 2^-2226. A product of significands (below 2^106)
  // at bit position e_a + e_b + 76 spans at most five digits; 2^1025 times 2^31 additions stays
  // below bit 3282, under the 106 digits' 3392.
  static constexpr int kDigits = 106;
  // Products are summed this many times at most before the carries are propagated (a digit takes
  // below 2^32 per addition and holds 2^63).
  static constexpr std::uint32_t kAddsBeforeCarry = std::uint32_t(1) << 30;

  // Splits x; false when x is zero (nothing to add). x must be finite.
  [[gnu::always_inline]] static bool unpack(double x, Term& t) {
    const std::uint64_t u = std::bit_cast<std::uint64_t>(x);
    const std::uint64_t biased = (u >> 52) & 0x7ff;
    const std::uint64_t normal = biased != 0 ? 1 : 0;
    t.m = (u & ((std::uint64_t(1) << 52) - 1)) | (normal << 52);
    t.e = static_cast<int>(biased + 1 - normal);
    t.negative = (u >> 63) != 0;
    return t.m != 0;
  }

  // S = 0, touching only the digits in use.
  void clear() {
    if (lo_ <= hi_) {
      std::fill(pos_ + lo_, pos_ + hi_ + 1, 0);
      std::fill(neg_ + lo_, neg_ + hi_ + 1, 0);
    }
    lo_ = kDigits;
    hi_ = -1;
    adds_ = 0;
    overflow_ = false;
  }

  // S += a b, exactly. A product at 2^1024 or above only sets overflow().
  [[gnu::always_inline]] void add_product(const Term& a, const Term& b) {
    const int e = a.e + b.e;
    if (e > kMaxExponentSum) {
      overflow_ = true;
      return;
    }
    add_product_digits(a, b, pos_, neg_);
    count_addition(e + 76);
  }
  // S += x, exactly (x finite).
  void add(double x) {
    Term t{};
    if (unpack(x, t)) add_bits(t.m, 0, t.e + 1151, t.negative);
  }

  // Makes room for `count` (< 2^30) additions of below 2^32 per digit each (add_magnitude()
  // below), whose values together stay below count 2^1025: propagates first when the digits
  // might otherwise overflow.
  void reserve(std::uint32_t count) {
    if (adds_ + count >= kAddsBeforeCarry) propagate();
    adds_ += count;
  }
  // S += (w2 2^128 + w1 2^64 + w0) 2^position with the given sign (w2 below 2^63), exactly, into
  // digits k to k + 6 (k = position / 32; k + 6 must be below kDigits). Counts no addition: the
  // caller reserve()s one per product the words sum.
  [[gnu::always_inline]] void add_magnitude(std::uint64_t w0, std::uint64_t w1, std::uint64_t w2,
                                            int position, bool negative) {
    const int k = position >> 5, shift = position & 31;
    // The words shifted by `shift` (< 32); (v >> 1) >> (63 - shift) is v >> (64 - shift).
    const std::uint64_t s[4] = {w0 << shift, (w1 << shift) | ((w0 >> 1) >> (63 - shift)),
                                (w2 << shift) | ((w1 >> 1) >> (63 - shift)),
                                (w2 >> 1) >> (63 - shift)};  // below 2^31
    std::int64_t* d = (negative ? neg_ : pos_) + k;
    for (int j = 0; j < 3; ++j) {
      d[2 * j] += static_cast<std::int64_t>(s[j] & 0xffffffffu);
      d[2 * j + 1] += static_cast<std::int64_t>(s[j] >> 32);
    }
    d[6] += static_cast<std::int64_t>(s[3]);
    lo_ = std::min(lo_, k);
    hi_ = std::max(hi_, k + 6);
  }

  bool overflow() const { return overflow_; }
  // e_a + e_b of a product below 2^1025: |a b| < 2^(e_a + e_b - 2150 + 106).
  static constexpr int kMaxExponentSum = 3069;
  // Rounds S greedily to n doubles (n <= 4): out[0] = RN(S), out[i] = RN(S - out[0] - ... -
  // out[i - 1]), round to nearest even, each remainder exact. Leaves S minus the terms behind.
  void split(double* out, int n);

 private:
  // Adds the integer (high 2^64 + low) 2^position (high below 2^42) to S with the given sign.
  [[gnu::always_inline]] void add_bits(std::uint64_t low, std::uint64_t high, int position,
                                       bool negative) {
    add_digits(low, high, position, negative, pos_, neg_);
    count_addition(position);
  }
  // Bookkeeping of one addition at `position`: the digits in use, the count of additions.
  [[gnu::always_inline]] void count_addition(int position) {
    const int k = position >> 5;
    lo_ = std::min(lo_, k);
    hi_ = std::max(hi_, k + 4);
    if (++adds_ >= kAddsBeforeCarry) propagate();
  }
  // The exact product a b into the digit set (pos, neg), without the bookkeeping.
  [[gnu::always_inline]] static void add_product_digits(const Term& a, const Term& b,
                                                        std::int64_t* pos, std::int64_t* neg) {
    __extension__ const unsigned __int128 product = static_cast<unsigned __int128>(a.m) * b.m;
    add_digits(static_cast<std::uint64_t>(product), static_cast<std::uint64_t>(product >> 64),
               a.e + b.e + 76, a.negative != b.negative, pos, neg);
  }
  // add_bits into the digit set (pos, neg), without count_addition().
  [[gnu::always_inline]] static void add_digits(std::uint64_t low, std::uint64_t high, int position,
                                                bool negative, std::int64_t* pos,
                                                std::int64_t* neg) {
    const int k = position >> 5, shift = position & 31;
    // The value shifted by `shift` (< 32) as three 64-bit words; (v >> 1) >> (63 - shift) is
    // v >> (64 - shift) without a shift by 64 when shift is 0.
    const std::uint64_t w0 = low << shift;
    const std::uint64_t w1 = (high << shift) | ((low >> 1) >> (63 - shift));
    const std::uint64_t w2 = (high >> 1) >> (63 - shift);
    std::int64_t* d = (negative ? neg : pos) + k;  // no negation: two unsigned sums
    d[0] += static_cast<std::int64_t>(w0 & 0xffffffffu);
    d[1] += static_cast<std::int64_t>(w0 >> 32);
    d[2] += static_cast<std::int64_t>(w1 & 0xffffffffu);
    d[3] += static_cast<std::int64_t>(w1 >> 32);
    d[4] += static_cast<std::int64_t>(w2);
  }

  // Folds neg_ into pos_ and propagates carries so every digit below the top one
  // lies in [0, 2^32) and the top one in (-2^32, 2^32); S keeps its value and the sign of the top
  // digit is the sign of S.
  void propagate();
  // propagate() when the digits below `from` (at least lo_) already lie in [0, 2^32) and neg_
  // holds nothing there: they neither change nor carry.
  void propagate_from(int from);
  // Propagates from `from` (as propagate_from), drops zero digits at both ends and negates S when
  // it is negative, so all digits lie in [0, 2^32). Returns the sign S had (+1, -1, or 0 when
  // S = 0).
  int normalize_from(int from);
  // RN(S) for S > 0 with normalized digits.
  double round_positive() const;
  // Bits [q, q + 64) of S (normalized digits; bits outside the digits in use are 0).
  std::uint64_t bits_from(int q) const;

  std::int64_t pos_[kDigits] = {};
  std::int64_t neg_[kDigits] = {};
  int lo_ = kDigits, hi_ = -1;  // the digits that may be nonzero
  std::uint32_t adds_ = 0;
  bool overflow_ = false;
};

}  // namespace shardsim
