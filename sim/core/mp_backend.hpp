// The storage behind Mp (mp.hpp): a Boost.Multiprecision backend that keeps an MPFR number in 56
// bytes with its limbs inline, where Boost's mpfr_float_backend<0> keeps a 32-byte mpfr_t and a
// heap block (MPFR's size word and the limbs: 48 bytes at mp256, 80 in all).
//
// Layout: the exponent, the precision and the sign as MPFR keeps them, and the significand's limbs
// in place when ceil(bits / 64) <= kInlineLimbs (mp256 carries 257 bits: 5 limbs), else a pointer
// to limbs from GMP's allocation functions (the pools of mp_arena.hpp when installed). No value
// below 321 bits allocates.
//
// Arithmetic: every operation builds an mpfr_t over the value's fields for one MPFR call (the
// layout MPFR documents for numbers it did not allocate: MPFR_DECL_INIT and the mpfr_custom_*
// interface), then keeps the exponent and sign MPFR wrote. Each eval_* function
// (mp_backend_ops.hpp) makes the MPFR call Boost's mpfr backend makes, with round to nearest, so
// results are the same bits: MPFR rounds each operation correctly, whatever holds its limbs. An
// operand that is also the result is passed as the same mpfr_t, as MPFR expects of aliases.
//
// Precision follows Boost's rules for mpfr_float (variable_precision_options::
// preserve_related_precision): a new value has the thread's default precision, a copy its source's,
// an assignment from a built-in type keeps the target's, and an operation's result the widest of
// the thread's default and its operands' (mp_detail::raise_to).
#pragma once

// <cstdint> before mpfr.h, which then declares its intmax_t functions (mpfr_set_sj, mpfr_set_uj);
// kept first by hand (clang-format regroups and sorts includes).
// clang-format off
#include <cstdint>
#include <gmp.h>
#include <mpfr.h>
// clang-format on

#include <atomic>
#include <cstring>
#include <ios>
#include <string>
#include <tuple>
#include <utility>

#include "core/mp_arena.hpp"

namespace shardsim {

namespace mp_detail {

// The precision new values take on this thread: the last set_thread_default_bits on it, else the
// process default when the thread first asked (as Boost's thread_default_precision).
extern std::atomic<long> g_default_bits;
inline thread_local long t_default_bits = 0;  // 0: not read yet
inline mpfr_prec_t default_bits() {
  if (t_default_bits == 0) t_default_bits = g_default_bits.load(std::memory_order_relaxed);
  return static_cast<mpfr_prec_t>(t_default_bits);
}
inline void set_thread_default_bits(mpfr_prec_t bits) { t_default_bits = static_cast<long>(bits); }
inline void set_process_default_bits(mpfr_prec_t bits) {
  g_default_bits.store(static_cast<long>(bits), std::memory_order_relaxed);
}

mp_limb_t* allocate_limbs(int count);
void free_limbs(mp_limb_t* limbs, int count) noexcept;
// Registers this thread's MPFR cache for release when the thread ends (Boost's mpfr_cleanup).
void keep_thread_cache_tidy() noexcept;

inline int limb_count(mpfr_prec_t bits) {
  return static_cast<int>((bits + GMP_NUMB_BITS - 1) / GMP_NUMB_BITS);
}

}  // namespace mp_detail

class MpBackend {
 public:
  using signed_types = std::tuple<long, long long>;
  using unsigned_types = std::tuple<unsigned long, unsigned long long>;
  using float_types = std::tuple<double, long double>;
  using exponent_type = long;

  static constexpr int kInlineLimbs = kMpInlineLimbs;

  // A precision in bits (a tag: Boost reads a constructor from an integer as a conversion).
  struct Bits {
    mpfr_prec_t value;
  };

  // +0 at the thread's default precision.
  MpBackend() : MpBackend(Bits{mp_detail::default_bits()}) {}
  // +0 with `bits` significand bits. REQUIRES: MPFR_PREC_MIN <= bits <= INT32_MAX.
  explicit MpBackend(Bits bits)
      : exp_(__MPFR_EXP_ZERO), prec_(static_cast<std::int32_t>(bits.value)), sign_(1), limbs_{} {
    if (heap()) limbs_.heap = mp_detail::allocate_limbs(count());
  }
  MpBackend(const MpBackend& o) : exp_(o.exp_), prec_(o.prec_), sign_(o.sign_), limbs_{} {
    if (heap()) limbs_.heap = mp_detail::allocate_limbs(count());
    std::memcpy(limbs(), o.limbs(), bytes());
  }
  // A heap source is left +0 at 64 bits: valid, destructible and assignable.
  MpBackend(MpBackend&& o) noexcept : exp_(o.exp_), prec_(o.prec_), sign_(o.sign_), limbs_{} {
    if (heap()) {
      limbs_.heap = o.limbs_.heap;
      o.exp_ = __MPFR_EXP_ZERO;
      o.prec_ = GMP_NUMB_BITS;
      o.sign_ = 1;
    } else {
      std::memcpy(limbs_.in, o.limbs_.in, bytes());
    }
  }
  ~MpBackend() {
    if (heap()) mp_detail::free_limbs(limbs_.heap, count());
    mp_detail::keep_thread_cache_tidy();
  }

  // Takes the source's precision and value.
  MpBackend& operator=(const MpBackend& o) {
    if (this == &o) return *this;
    reshape(o.prec_);
    exp_ = o.exp_;
    sign_ = o.sign_;
    std::memcpy(limbs(), o.limbs(), bytes());
    return *this;
  }
  MpBackend& operator=(MpBackend&& o) noexcept {
    swap(o);
    return *this;
  }
  // Built-in values are set at this value's precision, rounded to nearest (exact for every integer
  // and double at the precisions shardsim runs, which have 64 bits or more).
  MpBackend& operator=(unsigned long i);
  MpBackend& operator=(long i);
  MpBackend& operator=(unsigned long long i);
  MpBackend& operator=(long long i);
  MpBackend& operator=(double d);
  MpBackend& operator=(long double d);
  // Decimal text (mpfr_set_str, base 10). Throws std::runtime_error when it does not parse.
  MpBackend& operator=(const char* text);

  void swap(MpBackend& o) noexcept {
    MpBackend* a = this;
    MpBackend* b = &o;
    unsigned char t[sizeof(MpBackend)];
    std::memcpy(t, static_cast<void*>(a), sizeof t);
    std::memcpy(static_cast<void*>(a), static_cast<void*>(b), sizeof t);
    std::memcpy(static_cast<void*>(b), t, sizeof t);
  }
  std::string str(std::streamsize digits, std::ios_base::fmtflags flags) const;
  void negate() noexcept {  // mpfr_neg in place, as Boost (which keeps a NaN's sign)
    __mpfr_struct v = view();
    mpfr_neg(&v, &v, MPFR_RNDN);
    absorb(v);
  }
  int compare(const MpBackend& o) const;
  int compare(long i) const;
  int compare(unsigned long i) const;
  int compare(double d) const;
  int compare(long double d) const;
  int compare(long long i) const;
  int compare(unsigned long long i) const;

  mpfr_prec_t precision_bits() const { return prec_; }
  bool is_nan() const { return exp_ == __MPFR_EXP_NAN; }
  bool is_inf() const { return exp_ == __MPFR_EXP_INF; }
  bool is_zero() const { return exp_ == __MPFR_EXP_ZERO; }
  bool sign_bit() const { return sign_ < 0; }

  // An mpfr_t over this value, for reading (the value must outlive it and not change meanwhile).
  // data() is Boost's name; `mpfr_get_d(x.backend().data(), MPFR_RNDN)` reads x. The mpfr_t is
  // inside the Read: a pointer taken from a temporary one dangles after the full expression, so
  // keep the Read (`const auto view = x.backend().data(); mpfr_srcptr p = view;`). MPFR's
  // mpfr_set macro (and mpfr_set_ui/si of a constant 0, through a temporary MpfrOut) copies its
  // argument into a local inside a statement expression, past a temporary's end: give those a
  // named Read or MpfrOut.
  class Read {
   public:
    explicit Read(const MpBackend& b) : v_{b.view()} {}
    // Not trivially copyable, so that passing a Read itself (not get()) to a varargs function
    // such as mpfr_asprintf does not compile.
    Read(const Read& o) : v_{o.v_[0]} {}
    Read& operator=(const Read&) = delete;
    operator mpfr_srcptr() const { return v_; }  // NOLINT(google-explicit-constructor)
    mpfr_srcptr get() const { return v_; }

   private:
    mpfr_t v_;
  };
  Read data() const { return Read(*this); }

  // Makes this value `bits` wide (NaN, as mpfr_set_prec leaves it).
  void set_precision(mpfr_prec_t bits);
  // Makes this value at least `bits` wide, keeping its value (exact: only ever widens).
  void raise_to(mpfr_prec_t bits) {
    if (bits > prec_) widen(bits);
  }

  __mpfr_struct view() const {
    __mpfr_struct v;
    v._mpfr_prec = prec_;
    v._mpfr_sign = sign_;
    v._mpfr_exp = exp_;
    v._mpfr_d = const_cast<mp_limb_t*>(limbs());
    return v;
  }
  // Keeps what MPFR wrote into a view of this value (its limbs are already in place).
  void absorb(const __mpfr_struct& v) {
    exp_ = v._mpfr_exp;
    sign_ = v._mpfr_sign;
  }

 private:
  int count() const { return mp_detail::limb_count(prec_); }
  bool heap() const { return count() > kInlineLimbs; }
  std::size_t bytes() const { return static_cast<std::size_t>(count()) * sizeof(mp_limb_t); }
  mp_limb_t* limbs() { return heap() ? limbs_.heap : limbs_.in; }
  const mp_limb_t* limbs() const { return heap() ? limbs_.heap : limbs_.in; }
  // Makes room for `bits` (the value is lost unless the limb count stays).
  void reshape(mpfr_prec_t bits);
  void widen(mpfr_prec_t bits);

  mpfr_exp_t exp_;
  std::int32_t prec_;
  std::int32_t sign_;
  union Limbs {
    mp_limb_t in[kInlineLimbs];
    mp_limb_t* heap;
  } limbs_;
};

static_assert(sizeof(MpBackend) == kMpValueBytes, "mp_arena.hpp counts an mp value as 56 bytes");

// A writable mpfr_t over a value: MPFR writes through it, and the value keeps the result when it
// ends. One per value at a time; read other operands through data() or view().
class MpfrOut {
 public:
  explicit MpfrOut(MpBackend& b) : b_(&b), v_{b.view()} {}
  ~MpfrOut() { b_->absorb(v_[0]); }
  MpfrOut(const MpfrOut&) = delete;
  MpfrOut& operator=(const MpfrOut&) = delete;
  mpfr_ptr get() { return v_; }
  operator mpfr_ptr() { return v_; }  // NOLINT(google-explicit-constructor)

 private:
  MpBackend* b_;
  mpfr_t v_;
};

}  // namespace shardsim
