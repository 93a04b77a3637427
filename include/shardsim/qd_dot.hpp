// Exact dot products for the dd and qd scalars (qd.hpp): every product of terms computed exactly
// as an integer, summed in a long fixed-point accumulator, and rounded once at the end.
//
// The contraction kernels (attention's projections, linear layers: ops/dot_sum.hpp) sum hundreds
// of products per output. At dd/qd a product followed by an addition, each renormalized (QD's
// accurate_mul and ieee_add), costs about 135 ns at qd, as much as MPFR's 257-bit multiply-add;
// most of it is branching on magnitudes. ExactDot<R> instead multiplies every pair of nonzero terms
// a_i b_j exactly (the 53-bit significands as a 106-bit integer product) and adds it to a
// LongAccumulator, which holds any such sum exactly as an integer multiple of 2^-2226 (below the
// product of two least subnormals) in base-2^32 digits. value() rounds the exact sum S to the
// expansion's N doubles greedily: x0 = RN(S), x1 = RN(S - x0), ..., each remainder exact, so
// |x(i+1)| <= ulp(x(i)) / 2 (QD's non-overlapping form) and the result differs from the exact dot
// product by at most half an ulp of its last term (about 2^-213 relative at qd, 2^-107 at dd, and
// never more than half the least subnormal). That is more accurate than the sequential sum it
// replaces (whose error grows with every addition), and it does not depend on the order of the
// products.
//
// Non-finite: a non-finite term, or a product of terms at 2^1024 or above, makes value() the IEEE
// sum of the leading terms' products, the result the sequential kernels gave (Expansion::checked
// in qd.hpp). A zero sum is +0, as a sequential sum from +0 gives.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "shardsim/qd.hpp"

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
      std::fill(pos1_ + lo_, pos1_ + hi_ + 1, 0);
      std::fill(neg1_ + lo_, neg1_ + hi_ + 1, 0);
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

  // S += sum_i a_i b_i over i < n, exactly, for terms whose exponent sums e_a + e_b lie in
  // [e_lo, e_hi], e_hi at most kMaxExponentSum (zero significands add nothing). The lead terms'
  // IEEE sum too when kLead: lead += la_i lb_i in i's order. Odd i add into a second set of
  // digits (pos1_, neg1_), so that consecutive products at the same digits do not wait for each
  // other's stores; propagate() adds the two sets, and integer sums do not depend on the split.
  template <bool kLead>
  void add_products(const Term* a, const Term* b, std::int64_t n, int e_lo, int e_hi,
                    const double* la = nullptr, const double* lb = nullptr,
                    double* lead = nullptr) {
    lo_ = std::min(lo_, (e_lo + 76) >> 5);
    hi_ = std::max(hi_, ((e_hi + 76) >> 5) + 4);
    double l = kLead ? *lead : 0;
    for (std::int64_t first = 0; first < n; first += kAddsBeforeCarry / 2) {
      const std::int64_t last = std::min<std::int64_t>(n, first + kAddsBeforeCarry / 2);
      if (adds_ + (last - first) >= kAddsBeforeCarry) propagate();
      adds_ += static_cast<std::uint32_t>(last - first);
      std::int64_t i = first;
      for (; i + 1 < last; i += 2) {
        if constexpr (kLead) l = l + la[i] * lb[i] + la[i + 1] * lb[i + 1];  // in i's order
        add_product_digits(a[i], b[i], pos_, neg_);
        add_product_digits(a[i + 1], b[i + 1], pos1_, neg1_);
      }
      if (i < last) {
        if constexpr (kLead) l += la[i] * lb[i];
        add_product_digits(a[i], b[i], pos_, neg_);
      }
    }
    if constexpr (kLead) *lead = l;
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

  // Folds neg_, pos1_ and neg1_ into pos_ and propagates carries so every digit below the top one
  // lies in [0, 2^32) and the top one in (-2^32, 2^32); S keeps its value and the sign of the top
  // digit is the sign of S.
  void propagate();
  // Propagates, drops zero digits at both ends and negates S when it is negative, so all digits
  // lie in [0, 2^32). Returns the sign S had (+1, -1, or 0 when S = 0).
  int normalize();
  // RN(S) for S > 0 with normalized digits.
  double round_positive() const;
  // Bits [q, q + 64) of S (normalized digits; bits outside the digits in use are 0).
  std::uint64_t bits_from(int q) const;

  std::int64_t pos_[kDigits] = {};
  std::int64_t neg_[kDigits] = {};
  std::int64_t pos1_[kDigits] = {};  // add_products' second digit set
  std::int64_t neg1_[kDigits] = {};
  int lo_ = kDigits, hi_ = -1;  // the digits that may be nonzero
  std::uint32_t adds_ = 0;
  bool overflow_ = false;
};

// sum_i a_i b_i for Expansion<R> operands, exactly, rounded once (see the top of this file).
template <typename R>
class ExactDot {
 public:
  using Value = Expansion<R>;
  static constexpr int kTerms = Value::kTerms;

  void clear() {
    acc_.clear();
    lead_ = 0;
    nonfinite_ = false;
  }

  // Adds a b: every pair of nonzero terms as its exact product.
  [[gnu::always_inline]] void add(const Value& a, const Value& b) {
    lead_ += a.term(0) * b.term(0);
    if (single(a) && single(b)) {  // the common case: f64 inputs times f64 weights
      // A non-finite leading term makes lead_ non-finite for good, and value() ignores the
      // accumulator then: no test is needed here.
      LongAccumulator::Term ta{}, tb{};
      if (LongAccumulator::unpack(a.term(0), ta) && LongAccumulator::unpack(b.term(0), tb)) {
        acc_.add_product(ta, tb);
      }
      return;
    }
    if (single(b)) {
      add_scaled(b, a);  // an expansion times f64 weights, or the transpose
    } else if (single(a)) {
      add_scaled(a, b);
    } else {
      add_terms(a, b);
    }
  }

  // Adds v itself, exactly (a bias after the products).
  void add_value(const Value& v) {
    lead_ += v.term(0);
    for (int i = 0; i < kTerms; ++i) {
      const double x = v.term(i);
      if (!std::isfinite(x)) {
        nonfinite_ = true;
      } else {
        acc_.add(x);
      }
    }
  }

  // n values unpacked once, for the many dot products that reuse them (a row of inputs against
  // every output's weights): add(a, b) below adds a_i b_i for i < n.
  class Operand {
   public:
    // The values get(0), ..., get(n - 1) (get is called twice for each).
    template <typename Get>
    void assign(std::int64_t n, Get get) {
      n_ = n;
      lead_.resize(static_cast<std::size_t>(n));
      values_.clear();
      planes_ = 0;
      e_min_ = std::numeric_limits<int>::max();
      e_max_ = std::numeric_limits<int>::min();
      finite_ = true;
      LongAccumulator::Term t{};
      for (std::int64_t i = 0; i < n; ++i) {
        const Value& v = get(i);
        lead_[static_cast<std::size_t>(i)] = v.term(0);
        for (int p = 0; p < kTerms; ++p) {
          if (!std::isfinite(v.term(p))) {
            finite_ = false;
          } else if (LongAccumulator::unpack(v.term(p), t)) {
            planes_ = std::max(planes_, p + 1);
            e_min_ = std::min(e_min_, t.e);
            e_max_ = std::max(e_max_, t.e);
          }
        }
      }
      if (!finite_) {  // kept whole for the element-wise fallback
        for (std::int64_t i = 0; i < n; ++i) values_.push_back(get(i));
        return;
      }
      if (planes_ == 0) return;
      // Zero terms: significand 0 at an exponent inside [e_min, e_max], so they add nothing.
      terms_.assign(static_cast<std::size_t>(planes_ * n), LongAccumulator::Term{0, e_min_, false});
      for (std::int64_t i = 0; i < n; ++i) {
        const Value& v = get(i);
        for (int p = 0; p < planes_; ++p) {
          const double x = v.term(p);
          if (x != 0) LongAccumulator::unpack(x, terms_[static_cast<std::size_t>(p * n + i)]);
        }
      }
    }
    std::int64_t size() const { return n_; }

   private:
    friend class ExactDot;
    // Value i: kept when a term is not finite, else rebuilt from the leading term (its exact
    // bits, the sign of a zero too) and the unpacked tail terms (a zero tail term as +0, which
    // changes no sum and no test of add()).
    Value value(std::int64_t i) const {
      if (!finite_) return values_[static_cast<std::size_t>(i)];
      R r;
      r.x[0] = lead_[static_cast<std::size_t>(i)];
      for (int p = 1; p < kTerms; ++p) {
        r.x[p] = 0;
        if (p >= planes_) continue;
        const LongAccumulator::Term& t = terms_[static_cast<std::size_t>(p * n_ + i)];
        const double magnitude = std::ldexp(static_cast<double>(t.m), t.e - 1075);
        r.x[p] = t.negative ? -magnitude : magnitude;
      }
      return Value(r);
    }

    std::vector<Value> values_;                 // only when a term is not finite
    std::vector<double> lead_;                  // each value's leading term
    std::vector<LongAccumulator::Term> terms_;  // term p of value i at p n + i, p < planes_
    std::int64_t n_ = 0;
    int planes_ = 0;             // 1 + the last term index with a nonzero term in some value
    int e_min_ = 0, e_max_ = 0;  // over the nonzero terms
    bool finite_ = true;
  };

  // Adds a_i b_i for i < n (a and b of one size n), as n calls of add(a_i, b_i) would.
  void add(const Operand& a, const Operand& b) { add(a, 0, b, 0, a.n_); }
  // Adds a_(a0 + i) b_(b0 + i) for i < n, as n calls of add() would.
  void add(const Operand& a, std::int64_t a0, const Operand& b, std::int64_t b0, std::int64_t n) {
    if (!a.finite_ || !b.finite_ ||
        (a.planes_ > 0 && b.planes_ > 0 &&
         a.e_max_ + b.e_max_ > LongAccumulator::kMaxExponentSum)) {
      for (std::int64_t i = 0; i < n; ++i) add(a.value(a0 + i), b.value(b0 + i));
      return;
    }
    const double* la = a.lead_.data() + a0;
    const double* lb = b.lead_.data() + b0;
    if (a.planes_ == 0 || b.planes_ == 0) {  // only zero products: the leading sum alone
      for (std::int64_t i = 0; i < n; ++i) lead_ += la[i] * lb[i];
      return;
    }
    const int e_lo = a.e_min_ + b.e_min_, e_hi = a.e_max_ + b.e_max_;
    for (int p = 0; p < a.planes_; ++p) {
      for (int q = 0; q < b.planes_; ++q) {
        const LongAccumulator::Term* ta = a.terms_.data() + p * a.n_ + a0;
        const LongAccumulator::Term* tb = b.terms_.data() + q * b.n_ + b0;
        if (p == 0 && q == 0) {
          acc_.template add_products<true>(ta, tb, n, e_lo, e_hi, la, lb, &lead_);
        } else {
          acc_.template add_products<false>(ta, tb, n, e_lo, e_hi);
        }
      }
    }
  }

  // The rounded sum; the accumulator is spent (clear() before reuse).
  Value value() {
    if (nonfinite_ || acc_.overflow() || !std::isfinite(lead_)) return Value(R(lead_));
    R r;
    acc_.split(r.x, kTerms);
    return Value(r);
  }

 private:
  // s's leading term times every term of m (s single).
  void add_scaled(const Value& s, const Value& m) {
    LongAccumulator::Term ts{}, tm{};
    // s = 0 adds nothing; a non-finite s has made lead_ non-finite, and value() then ignores
    // the accumulator.
    if (!LongAccumulator::unpack(s.term(0), ts)) return;
    for (int i = 0; i < kTerms; ++i) {
      const double x = m.term(i);
      if (x == 0) continue;
      if (!std::isfinite(x)) {
        nonfinite_ = true;
        continue;
      }
      LongAccumulator::unpack(x, tm);
      acc_.add_product(ts, tm);
    }
  }
  // Every pair of nonzero terms (out of line: the single-term cases above are the hot ones).
  [[gnu::noinline]] void add_terms(const Value& a, const Value& b) {
    LongAccumulator::Term ta[kTerms], tb[kTerms];
    const int na = unpack(a, ta), nb = unpack(b, tb);
    for (int i = 0; i < na; ++i) {
      for (int j = 0; j < nb; ++j) acc_.add_product(ta[i], tb[j]);
    }
  }
  // Whether v is its leading term alone (every other term +0 or -0).
  static bool single(const Value& v) {
    std::uint64_t tails = 0;
    for (int i = 1; i < kTerms; ++i) tails |= std::bit_cast<std::uint64_t>(v.term(i));
    return (tails << 1) == 0;
  }
  // The nonzero terms of v into t; a non-finite term marks the sum non-finite.
  int unpack(const Value& v, LongAccumulator::Term* t) {
    int n = 0;
    for (int i = 0; i < kTerms; ++i) {
      const double x = v.term(i);
      if (x == 0) continue;
      if (!std::isfinite(x)) {
        nonfinite_ = true;
        continue;
      }
      LongAccumulator::unpack(x, t[n++]);
    }
    return n;
  }

  LongAccumulator acc_;
  double lead_ = 0;  // IEEE sum of the leading products: the result when anything is non-finite
  bool nonfinite_ = false;
};

}  // namespace shardsim
