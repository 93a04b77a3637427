// LongAccumulator's carries and rounding (long_accumulator.hpp).
#include "core/long_accumulator.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>

#include "core/error.hpp"

namespace shardsim {

namespace {
constexpr std::int64_t kDigitMask = 0xffffffff;
constexpr int kLeastSubnormalBit = 1152;  // 2^-1074 = 2^(1152 - 2226)
}  // namespace

void LongAccumulator::propagate() { propagate_from(lo_); }

void LongAccumulator::propagate_from(int from) {
  adds_ = 0;
  if (lo_ > hi_) return;
  // One pass: neg_ folded into pos_ and the carry moved up. Each set took at most adds_ < 2^30
  // additions below 2^32 per digit, so pos_ - neg_ + carry does not overflow. Arithmetic shifts
  // (C++20): carry = floor(v / 2^32), and v - carry 2^32 = v & mask.
  std::int64_t carry = 0;
  for (int k = from; k < hi_; ++k) {
    const std::int64_t v = pos_[k] - neg_[k] + carry;
    neg_[k] = 0;
    carry = v >> 32;
    pos_[k] = v & kDigitMask;
  }
  // The top digit keeps its sign; only a magnitude of 2^32 or more moves up a digit. |S| < 2^1056
  // (2^30 additions below 2^1025 between propagations), below digit 104.
  std::int64_t& top = pos_[hi_];
  top += carry - neg_[hi_];
  neg_[hi_] = 0;
  if (top >= (std::int64_t(1) << 32) || top <= -(std::int64_t(1) << 32)) {
    SHARDSIM_ASSERT(hi_ + 1 < kDigits, "LongAccumulator: sum beyond 2^1056");
    pos_[hi_ + 1] = top >> 32;
    top &= kDigitMask;
    ++hi_;
  }
}

int LongAccumulator::normalize_from(int from) {
  propagate_from(from);
  while (hi_ >= lo_ && pos_[hi_] == 0) --hi_;
  while (lo_ <= hi_ && pos_[lo_] == 0) ++lo_;
  if (lo_ > hi_) {
    lo_ = kDigits;
    hi_ = -1;
    return 0;
  }
  if (pos_[hi_] > 0) return 1;
  // S < 0: -S has the top digit positive and the lower ones in (-2^32, 0]; carries make them
  // digits again and can only lower the top.
  for (int k = lo_; k <= hi_; ++k) pos_[k] = -pos_[k];
  propagate();
  while (pos_[hi_] == 0) --hi_;
  while (pos_[lo_] == 0) ++lo_;
  return -1;
}

std::uint64_t LongAccumulator::bits_from(int q) const {
  const auto digit = [&](int k) -> std::uint64_t {
    return k >= lo_ && k <= hi_ ? static_cast<std::uint64_t>(pos_[k]) : 0;
  };
  const int k = q >> 5, shift = q & 31;
  const std::uint64_t low = digit(k) | (digit(k + 1) << 32);
  // (v << 1) << (63 - shift) is v << (64 - shift), and 0 for shift 0.
  return (low >> shift) | ((digit(k + 2) << 1) << (63 - shift));
}

double LongAccumulator::round_positive() const {
  const int lead = 32 * hi_ + 31 - std::countl_zero(static_cast<std::uint32_t>(pos_[hi_]));
  // The last bit a double keeps: 52 below the leading one, or 2^-1074's.
  const int last = std::max(lead - 52, kLeastSubnormalBit);
  const std::uint64_t window = bits_from(last - 1);  // the round bit, then the kept bits
  std::uint64_t mant = window >> 1;                  // at most 53 bits
  const bool round = (window & 1) != 0;
  const int below = last - 1;  // sticky: any bit under the round bit
  bool sticky = (below >> 5) >= lo_ && (static_cast<std::uint64_t>(pos_[below >> 5]) &
                                        ((std::uint64_t(1) << (below & 31)) - 1)) != 0;
  for (int k = lo_; k < (below >> 5) && !sticky; ++k) sticky = pos_[k] != 0;
  if (round && (sticky || (mant & 1) != 0)) ++mant;
  // mant 2^(last - 2226): below 2^52 at last = 1152 a subnormal whose bit pattern is mant; from
  // 2^52 on, biased exponent last - 1151 with the implicit bit, which is the pattern
  // ((last - 1152) << 52) + mant, also when rounding carried mant to 2^53.
  const std::uint64_t bits = (static_cast<std::uint64_t>(last - kLeastSubnormalBit) << 52) + mant;
  if (bits >= (std::uint64_t(0x7ff) << 52)) return std::numeric_limits<double>::infinity();
  return std::bit_cast<double>(bits);
}

void LongAccumulator::split(double* out, int n) {
  int sign = 1;    // S = sign * (the digits' value)
  int from = lo_;  // the digits below are normalized, with nothing in neg_
  for (int i = 0; i < n; ++i) {
    const int s = normalize_from(from);
    if (s == 0) {
      std::fill(out + i, out + n, 0.0);
      return;
    }
    sign *= s;
    const double r = round_positive();
    out[i] = sign > 0 ? r : -r;
    // Past the double range, or below half the least subnormal: the rest would repeat it.
    if (r == std::numeric_limits<double>::infinity()) {
      std::fill(out + i + 1, out + n, 0.0);
      return;
    }
    if (r == 0) {
      std::fill(out + i + 1, out + n, out[i]);
      return;
    }
    // S -= r: r's significand into neg_ from digit `from` on; the digits below stay as they
    // are, so the next normalization starts there.
    Term t{};
    unpack(r, t);
    add_bits(t.m, 0, t.e + 1151, true);
    from = (t.e + 1151) >> 5;
  }
}

}  // namespace shardsim
