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
// Vectors unpacked once (ExactDot::Operand, the kernels' rows of keys, values and weights) keep
// each term as a signed integer below 2^60 and a bucket of 8 exponents, so that two terms'
// product is one signed 64 x 64 -> 128-bit multiplication, with no shift: it is added to a
// 192-bit column sum picked by the buckets' sum, and the columns go into the LongAccumulator once
// per call. The sum is the same integer, so the bits are those of the element-wise path.
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

#include "core/long_accumulator.hpp"
#include "core/qd.hpp"

namespace shardsim {

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

  // A nonzero term x = m 2^(e - 1075) (LongAccumulator::Term) as the signed integer
  // m 2^(e mod 8), below 2^60 in magnitude, and its bucket e / 8 (rounded down):
  // x = m 2^(8 bucket - 1075), bucket in [0, 255]. Two terms' product is then an exact signed
  // 128-bit integer times 2^(8 (bucket_a + bucket_b) - 2150), with no shift to align it.
  struct Scaled {
    std::int64_t m;
    std::int64_t bucket;
  };

  // n values unpacked once, for the many dot products that reuse them (a row of inputs against
  // every output's weights): add(a, b) below adds a_i b_i for i < n.
  class Operand {
   public:
    // The values get(0), ..., get(n - 1) (get is called once for each, twice when some value has
    // more than one nonzero term).
    template <typename Get>
    void assign(std::int64_t n, Get get) {
      n_ = n;
      lead_.resize(static_cast<std::size_t>(n));
      values_.clear();
      planes_ = 0;
      e_min_ = std::numeric_limits<int>::max();
      e_max_ = std::numeric_limits<int>::min();
      finite_ = true;
      // Plane 0 is unpacked in the first pass (a vector of f64 values needs no second one).
      terms_.resize(static_cast<std::size_t>(n));
      LongAccumulator::Term t{};
      for (std::int64_t i = 0; i < n; ++i) {
        const Value& v = get(i);
        lead_[static_cast<std::size_t>(i)] = v.term(0);
        terms_[static_cast<std::size_t>(i)] = Scaled{0, 0};
        for (int p = 0; p < kTerms; ++p) {
          if (!std::isfinite(v.term(p))) {
            finite_ = false;
          } else if (LongAccumulator::unpack(v.term(p), t)) {
            planes_ = std::max(planes_, p + 1);
            e_min_ = std::min(e_min_, t.e);
            e_max_ = std::max(e_max_, t.e);
            if (p == 0) terms_[static_cast<std::size_t>(i)] = scaled(t);
          }
        }
      }
      if (!finite_) {  // kept whole for the element-wise fallback
        for (std::int64_t i = 0; i < n; ++i) values_.push_back(get(i));
        return;
      }
      if (planes_ == 0) return;
      // Zero terms: 0 in a bucket inside the nonzero terms' range, so they add nothing.
      for (std::int64_t i = 0; i < n; ++i) {
        Scaled& zero = terms_[static_cast<std::size_t>(i)];
        if (zero.m == 0) zero.bucket = e_min_ >> 3;
      }
      if (planes_ == 1) return;
      terms_.resize(static_cast<std::size_t>(planes_ * n), Scaled{0, e_min_ >> 3});
      for (std::int64_t i = 0; i < n; ++i) {
        const Value& v = get(i);
        for (int p = 1; p < planes_; ++p) {
          if (LongAccumulator::unpack(v.term(p), t)) {
            terms_[static_cast<std::size_t>(p * n + i)] = scaled(t);
          }
        }
      }
    }
    std::int64_t size() const { return n_; }

   private:
    friend class ExactDot;
    static Scaled scaled(const LongAccumulator::Term& t) {
      const auto m = static_cast<std::int64_t>(t.m << (t.e & 7));
      return Scaled{t.negative ? -m : m, t.e >> 3};
    }
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
        const Scaled& t = terms_[static_cast<std::size_t>(p * n_ + i)];
        // |m| has at most 53 significant bits: its conversion is exact.
        const double magnitude =
            std::ldexp(static_cast<double>(t.m < 0 ? -t.m : t.m), 8 * t.bucket - 1075);
        r.x[p] = t.m < 0 ? -magnitude : magnitude;
      }
      return Value(r);
    }

    std::vector<Value> values_;  // only when a term is not finite
    std::vector<double> lead_;   // each value's leading term
    std::vector<Scaled> terms_;  // term p of value i at p n + i, p < planes_
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
    if (sums_.empty()) {
      sums_.resize(kSets * kColumns);
      carries_.resize(kSets * kColumns);
    }
    const int c_lo = (a.e_min_ >> 3) + (b.e_min_ >> 3), c_hi = (a.e_max_ >> 3) + (b.e_max_ >> 3);
    const std::int64_t pairs = a.planes_ * b.planes_;
    for (std::int64_t first = 0; first < n; first += kPiece) {
      const std::int64_t count = std::min(kPiece, n - first);
      for (int p = 0; p < a.planes_; ++p) {
        for (int q = 0; q < b.planes_; ++q) {
          const Scaled* ta = a.terms_.data() + p * a.n_ + a0 + first;
          const Scaled* tb = b.terms_.data() + q * b.n_ + b0 + first;
          if (p == 0 && q == 0) {  // the leading sum beside the integer work, which hides it
            add_columns<true>(ta, tb, count, la + first, lb + first);
          } else {
            add_columns<false>(ta, tb, count);
          }
        }
      }
      acc_.reserve(static_cast<std::uint32_t>(pairs * count));
      fold_columns(c_lo, c_hi);
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

  // A column's sum of products is the signed 192-bit integer carry 2^128 + sum: sum a signed
  // 128-bit integer that wraps around, carry the count of its wraps (upward minus downward).
  __extension__ typedef __int128 Wide;
  // Bucket sums lie in [0, 510].
  static constexpr int kColumns = 512;
  // Sets of columns that consecutive products alternate between.
  static constexpr int kSets = 4;
  // The elements of one add(Operand...) piece: its products (at most 16 per element) stay below
  // the 2^30 additions LongAccumulator::reserve() takes, and each column's value below 2^150
  // (2^30 products below 2^120), far inside the 192 bits a column and a fold hold.
  static constexpr std::int64_t kPiece = std::int64_t(1) << 26;

  // Column c of set s gets every product of a[i] and b[i] whose buckets sum to c, for i = s
  // modulo kSets, so that consecutive products into one column do not wait for each other's
  // stores (integer sums do not depend on the split). With kLead, also the IEEE sum
  // lead_ += la[i] lb[i], in i's order as add(a_i, b_i) adds them.
  template <bool kLead>
  [[gnu::always_inline]] void add_columns(const Scaled* a, const Scaled* b, std::int64_t n,
                                          const double* la = nullptr, const double* lb = nullptr) {
    double l = lead_;
    Wide* sums = sums_.data();
    std::int64_t* carries = carries_.data();
    std::int64_t i = 0;
    for (; i + kSets <= n; i += kSets) {
      for (int s = 0; s < kSets; ++s) {
        if constexpr (kLead) l += la[i + s] * lb[i + s];  // in i's order
        const std::int64_t c = (a[i + s].bucket + b[i + s].bucket) * kSets + s;
        add_product(sums[c], carries[c], a[i + s].m, b[i + s].m);
      }
    }
    for (; i < n; ++i) {
      if constexpr (kLead) l += la[i] * lb[i];
      const std::int64_t c = (a[i].bucket + b[i].bucket) * kSets;  // set 0
      add_product(sums[c], carries[c], a[i].m, b[i].m);
    }
    if constexpr (kLead) lead_ = l;
  }
  [[gnu::always_inline]] static void add_product(Wide& sum, std::int64_t& carry, std::int64_t x,
                                                 std::int64_t y) {
    const Wide p = static_cast<Wide>(x) * y;  // |p| < 2^120: exact
    // A wrap past 2^127 (p > 0) or -2^127 (p < 0) moves 2^128 into the carry; rare.
    if (__builtin_add_overflow(sum, p, &sum)) [[unlikely]]
      carry += p < 0 ? -1 : 1;
  }
  // Adds columns [c_lo, c_hi] of every set to the accumulator, column c at bit 8 c + 76 (the
  // product of terms in buckets b_a, b_b is p 2^(8 (b_a + b_b) - 2150) = p 2^(8 c + 76 - 2226)),
  // and zeroes them. c_hi is at most kMaxExponentSum / 8, so the digits stay below kDigits.
  void fold_columns(int c_lo, int c_hi) {
    for (int c = c_lo; c <= c_hi; ++c) {
      Wide low = 0;
      std::int64_t high = 0;
      for (int s = 0; s < kSets; ++s) {
        Wide& sum = sums_[static_cast<std::size_t>(c * kSets + s)];
        std::int64_t& carry = carries_[static_cast<std::size_t>(c * kSets + s)];
        high += carry;
        if (__builtin_add_overflow(low, sum, &low)) high += sum < 0 ? -1 : 1;
        sum = 0;
        carry = 0;
      }
      if (low == 0 && high == 0) continue;
      // high 2^128 + low as 192-bit two's complement words: low's sign extends into the top.
      __extension__ using U128 = unsigned __int128;
      auto w0 = static_cast<std::uint64_t>(low);
      auto w1 = static_cast<std::uint64_t>(static_cast<U128>(low) >> 64);
      auto w2 = static_cast<std::uint64_t>(high) - (low < 0 ? 1 : 0);
      const bool negative = static_cast<std::int64_t>(w2) < 0;
      if (negative) {  // the magnitude: ~w + 1 over the three words
        w0 = ~w0 + 1;
        w1 = ~w1 + (w0 == 0 ? 1 : 0);
        w2 = ~w2 + (w0 == 0 && w1 == 0 ? 1 : 0);
      }
      acc_.add_magnitude(w0, w1, w2, 8 * c + 76, negative);
    }
  }

  LongAccumulator acc_;
  double lead_ = 0;  // IEEE sum of the leading products: the result when anything is non-finite
  bool nonfinite_ = false;
  // Column c of set s at c kSets + s (a column's sets side by side), for add(Operand...); zero
  // between calls (made on first use).
  std::vector<Wide> sums_;
  std::vector<std::int64_t> carries_;
};

}  // namespace shardsim
