// MpBackend's out-of-line parts (mp_backend.hpp).
#include "core/mp_backend.hpp"

#include <boost/multiprecision/detail/digits.hpp>
#include <cmath>
#include <stdexcept>

namespace shardsim {

namespace mp_detail {

// Boost's default for mpfr_float before anything sets one: 20 decimal digits.
std::atomic<long> g_default_bits{
    static_cast<long>(boost::multiprecision::detail::digits10_2_2(20))};

mp_limb_t* allocate_limbs(int count) {
  void* (*allocate)(std::size_t) = nullptr;
  mp_get_memory_functions(&allocate, nullptr, nullptr);
  return static_cast<mp_limb_t*>(allocate(static_cast<std::size_t>(count) * sizeof(mp_limb_t)));
}

void free_limbs(mp_limb_t* limbs, int count) noexcept {
  void (*release)(void*, std::size_t) = nullptr;
  mp_get_memory_functions(nullptr, nullptr, &release);
  release(limbs, static_cast<std::size_t>(count) * sizeof(mp_limb_t));
}

namespace {
// MPFR keeps caches (constants such as log 2, per thread where it is built thread-safe): the
// thread's are freed when it ends, the process's at exit, as Boost's mpfr_cleanup does.
struct ThreadCache {
  ~ThreadCache() { mpfr_free_cache2(MPFR_FREE_LOCAL_CACHE); }
};
struct ProcessCache {
  ~ProcessCache() { mpfr_free_cache(); }
} g_process_cache;
}  // namespace

void keep_thread_cache_tidy() noexcept {
  thread_local ThreadCache cache;
  (void)cache;
}

}  // namespace mp_detail

namespace {

// Runs f on a writable view of b.
template <typename F>
MpBackend& set_with(MpBackend& b, F f) {
  MpfrOut out(b);
  f(out.get());
  return b;
}

}  // namespace

MpBackend& MpBackend::operator=(unsigned long i) {
  return set_with(*this, [&](mpfr_ptr x) { mpfr_set_ui(x, i, MPFR_RNDN); });
}
MpBackend& MpBackend::operator=(long i) {
  return set_with(*this, [&](mpfr_ptr x) { mpfr_set_si(x, i, MPFR_RNDN); });
}
MpBackend& MpBackend::operator=(unsigned long long i) {
  return set_with(*this, [&](mpfr_ptr x) { mpfr_set_uj(x, i, MPFR_RNDN); });
}
MpBackend& MpBackend::operator=(long long i) {
  return set_with(*this, [&](mpfr_ptr x) { mpfr_set_sj(x, i, MPFR_RNDN); });
}
MpBackend& MpBackend::operator=(double d) {
  return set_with(*this, [&](mpfr_ptr x) { mpfr_set_d(x, d, MPFR_RNDN); });
}
MpBackend& MpBackend::operator=(long double d) {
  return set_with(*this, [&](mpfr_ptr x) { mpfr_set_ld(x, d, MPFR_RNDN); });
}
MpBackend& MpBackend::operator=(const char* text) {
  int status = 0;
  set_with(*this, [&](mpfr_ptr x) { status = mpfr_set_str(x, text, 10, MPFR_RNDN); });
  if (status != 0) {
    throw std::runtime_error(std::string("Unable to parse string \"") + text +
                             "\"as a valid floating point number.");
  }
  return *this;
}

int MpBackend::compare(const MpBackend& o) const { return mpfr_cmp(data(), o.data()); }
int MpBackend::compare(long i) const { return mpfr_cmp_si(data().get(), i); }
int MpBackend::compare(unsigned long i) const { return mpfr_cmp_ui(data().get(), i); }
int MpBackend::compare(double d) const { return mpfr_cmp_d(data(), d); }
int MpBackend::compare(long double d) const { return mpfr_cmp_ld(data(), d); }
// As Boost's: the integer made a value at this value's precision, then compared.
int MpBackend::compare(long long i) const {
  MpBackend v(Bits{prec_});
  v = i;
  return compare(v);
}
int MpBackend::compare(unsigned long long i) const {
  MpBackend v(Bits{prec_});
  v = i;
  return compare(v);
}

std::string MpBackend::str(std::streamsize digits, std::ios_base::fmtflags flags) const {
  // Every digit the precision holds when none is asked for (Boost: max_digits10).
  if (digits <= 0) digits = static_cast<std::streamsize>(std::ceil(prec_ * 0.30102999566)) + 1;
  const int n = static_cast<int>(digits);
  char* text = nullptr;
  int length = 0;
  if (flags & std::ios_base::scientific) {
    length = mpfr_asprintf(&text, "%.*Re", n - 1, data().get());
  } else if (flags & std::ios_base::fixed) {
    length = mpfr_asprintf(&text, "%.*Rf", n, data().get());
  } else {
    length = mpfr_asprintf(&text, "%.*Rg", n, data().get());
  }
  if (length < 0 || text == nullptr) throw std::runtime_error("mpfr_asprintf failed");
  std::string out(text, static_cast<std::size_t>(length));
  mpfr_free_str(text);
  return out;
}

void MpBackend::reshape(mpfr_prec_t bits) {
  const int old_count = count();
  const int new_count = mp_detail::limb_count(bits);
  const bool was_heap = heap();
  if (was_heap && new_count == old_count) {
    prec_ = static_cast<std::int32_t>(bits);
    return;
  }
  if (was_heap) mp_detail::free_limbs(limbs_.heap, old_count);
  prec_ = static_cast<std::int32_t>(bits);
  if (heap()) limbs_.heap = mp_detail::allocate_limbs(new_count);
}

void MpBackend::set_precision(mpfr_prec_t bits) {
  reshape(bits);
  set_with(*this, [](mpfr_ptr x) { mpfr_set_nan(x); });
}

void MpBackend::widen(mpfr_prec_t bits) {
  MpBackend wide(Bits{bits});
  // A named view: mpfr_set is a macro that copies its source pointer inside a statement
  // expression, which outlives a temporary Read.
  const Read source = data();
  set_with(wide, [&](mpfr_ptr x) { mpfr_set(x, source.get(), MPFR_RNDN); });
  swap(wide);
}

}  // namespace shardsim
