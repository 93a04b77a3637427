// exp_each for qd (qd.hpp): QD's exp for several values at once, one value per vector lane, with
// the bits of QD's own exp (libqd, qd_real.cpp) for every value.
//
// QD's exp(a) reduces the argument, r = (a - m log 2) / 2^16 with m = floor(a0 / log2_0 + 0.5),
// sums the Taylor series of exp(r) - 1 from r + r^2/2 on, term t_i = r^(i+3) / (i+3)! for i = 0,
// 1, ..., until |t_i| <= 2^-16 eps or 9 terms, squares its way back 16 times (s = 2s + s^2), adds 1
// and scales by 2^m. Each step is one of QD's inline operations (qd_inline.h: sloppy_add,
// sloppy_mul, sqr, qd * double, qd + double, mul_pwr2), whose source is a fixed sequence of IEEE
// double operations whose only data-dependent branches are renorm's. The lanes below run that
// sequence operation for operation on vectors of doubles (GCC vectors: each operator is the IEEE
// operation lane by lane, nothing is fused, -ffp-contract=off), with:
//   two_prod   Dekker's splitting, as libqd is built (Debian's qd_config.h defines no QD_FMS);
//              its branch for |a| > 2^996 is never taken here (every operand is below 710).
//   renorm     the path every nonzero case takes (s1, s2, s3 != 0, x0 finite); a lane that would
//              take another path anywhere is marked, and its value is recomputed by QD's exp.
//   series     a lane stops adding terms when QD's loop would stop; later terms are computed for
//              the other lanes and discarded for it (a select keeps its s and p).
// The reduction's m and the final 2^m (std::ldexp) are done per value, as QD does them. The
// result is then QD's result bit for bit, whatever the CPU: tests/qd_exp_test.cpp compares it with
// QD's exp over arguments of every kind, and a self-check at first use does the same on a few
// arguments and falls back to QD's exp for good if the linked libqd computes differently (a
// future QD release could change its exp).
//
// Values outside the lanes' domain (non-finite terms, a0 <= -709 or >= 709, 0, exactly 1) take
// the scalar exp (qd.hpp) as before. About 0.4% of random arguments leave the common renorm path.
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/lane_isa.hpp"
#include "core/lane_sums.hpp"
#include "core/qd.hpp"

// The helpers below take and return vectors by value. They are always inlined into one of the
// two copies run_lanes makes of exp_values (baseline or AVX2), so no call passes a vector: GCC's
// note about the 32-byte vector ABI concerns calls that never happen.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace shardsim {

namespace detail {
// 1/n! for n = 3, ..., 11 to qd precision: QD's table (qd_real.cpp, inv_fact), the Taylor
// coefficients its exp uses (tests/qd_exp_test.cpp checks each against 1/n! in MPFR).
const qd_real kExpInverseFactorial[9] = {
    qd_real(1.66666666666666657e-01, 9.25185853854297066e-18, 5.13581318503262866e-34,
            2.85094902409834186e-50),
    qd_real(4.16666666666666644e-02, 2.31296463463574266e-18, 1.28395329625815716e-34,
            7.12737256024585466e-51),
    qd_real(8.33333333333333322e-03, 1.15648231731787138e-19, 1.60494162032269652e-36,
            2.22730392507682967e-53),
    qd_real(1.38888888888888894e-03, -5.30054395437357706e-20, -1.73868675534958776e-36,
            -1.63335621172300840e-52),
    qd_real(1.98412698412698413e-04, 1.72095582934207053e-22, 1.49269123913941271e-40,
            1.29470326746002471e-58),
    qd_real(2.48015873015873016e-05, 2.15119478667758816e-23, 1.86586404892426588e-41,
            1.61837908432503088e-59),
    qd_real(2.75573192239858925e-06, -1.85839327404647208e-22, 8.49175460488199287e-39,
            -5.72661640789429621e-55),
    qd_real(2.75573192239858883e-07, 2.37677146222502973e-23, -3.26318890334088294e-40,
            1.61435111860404415e-56),
    qd_real(2.50521083854417202e-08, -1.44881407093591197e-24, 2.04267351467144546e-41,
            -8.49632672007163175e-58)};

}  // namespace detail

namespace {

typedef double V __attribute__((vector_size(32)));
typedef long long M __attribute__((vector_size(32)));
constexpr int kLanes = 4;

struct Q {  // four qd values, term by term
  V x0, x1, x2, x3;
};

#define SHARDSIM_LANE [[gnu::always_inline]] inline

SHARDSIM_LANE V broadcast(double d) { return V{d, d, d, d}; }
SHARDSIM_LANE Q broadcast(const qd_real& c) {
  return Q{broadcast(c.x[0]), broadcast(c.x[1]), broadcast(c.x[2]), broadcast(c.x[3])};
}
SHARDSIM_LANE V select(M m, V a, V b) { return (V)(((M)a & m) | ((M)b & ~m)); }
SHARDSIM_LANE Q select(M m, const Q& a, const Q& b) {
  return Q{select(m, a.x0, b.x0), select(m, a.x1, b.x1), select(m, a.x2, b.x2),
           select(m, a.x3, b.x3)};
}

// qd's inline.h: quick_two_sum, two_sum, split (below 2^996), two_prod, two_sqr.
SHARDSIM_LANE V quick_two_sum(V a, V b, V& err) {
  const V s = a + b;
  err = b - (s - a);
  return s;
}
SHARDSIM_LANE V two_sum(V a, V b, V& err) {
  const V s = a + b;
  const V bb = s - a;
  err = (a - (s - bb)) + (b - bb);
  return s;
}
SHARDSIM_LANE void split(V a, V& hi, V& lo) {
  const V temp = 134217729.0 * a;  // 2^27 + 1
  hi = temp - (temp - a);
  lo = a - hi;
}
SHARDSIM_LANE V two_prod(V a, V b, V& err) {
  V a_hi, a_lo, b_hi, b_lo;
  const V p = a * b;
  split(a, a_hi, a_lo);
  split(b, b_hi, b_lo);
  err = ((a_hi * b_hi - p) + a_hi * b_lo + a_lo * b_hi) + a_lo * b_lo;
  return p;
}
SHARDSIM_LANE V two_sqr(V a, V& err) {
  V hi, lo;
  const V q = a * a;
  split(a, hi, lo);
  err = ((hi * hi - q) + 2.0 * hi * lo) + lo * lo;
  return q;
}

// qd_inline.h: three_sum, three_sum2, and renorm of five terms on its all-nonzero path.
SHARDSIM_LANE void three_sum(V& a, V& b, V& c) {
  V t2, t3;
  const V t1 = two_sum(a, b, t2);
  a = two_sum(c, t1, t3);
  b = two_sum(t2, t3, c);
}
SHARDSIM_LANE void three_sum2(V& a, V& b, V& c) {
  V t2, t3;
  const V t1 = two_sum(a, b, t2);
  a = two_sum(c, t1, t3);
  b = t2 + t3;
}
SHARDSIM_LANE Q renorm(V c0, V c1, V c2, V c3, V c4, M& off_path) {
  const V inf = broadcast(HUGE_VAL);
  off_path |= (c0 == inf) | (c0 == -inf);
  V s0 = quick_two_sum(c3, c4, c4);
  s0 = quick_two_sum(c2, s0, c3);
  s0 = quick_two_sum(c1, s0, c2);
  c0 = quick_two_sum(c0, s0, c1);
  V s2, s3;
  off_path |= c1 == 0.0;
  const V s1 = quick_two_sum(c1, c2, s2);
  off_path |= s2 == 0.0;
  s2 = quick_two_sum(s2, c3, s3);
  off_path |= s3 == 0.0;
  s3 += c4;
  return Q{c0, s1, s2, s3};
}

// qd_inline.h's sloppy_add (qd + qd, and qd - qd as a + (-b)).
SHARDSIM_LANE Q add(const Q& a, const Q& b, M& off_path) {
  V s0 = a.x0 + b.x0, s1 = a.x1 + b.x1, s2 = a.x2 + b.x2, s3 = a.x3 + b.x3;
  const V v0 = s0 - a.x0, v1 = s1 - a.x1, v2 = s2 - a.x2, v3 = s3 - a.x3;
  const V w0 = a.x0 - (s0 - v0), w1 = a.x1 - (s1 - v1), w2 = a.x2 - (s2 - v2),
          w3 = a.x3 - (s3 - v3);
  V t0 = w0 + (b.x0 - v0), t1 = w1 + (b.x1 - v1), t2 = w2 + (b.x2 - v2);
  const V t3 = w3 + (b.x3 - v3);
  s1 = two_sum(s1, t0, t0);
  three_sum(s2, t0, t1);
  three_sum2(s3, t0, t2);
  t0 = t0 + t1 + t3;
  return renorm(s0, s1, s2, s3, t0, off_path);
}
// qd + double.
SHARDSIM_LANE Q add(const Q& a, V b, M& off_path) {
  V e;
  const V c0 = two_sum(a.x0, b, e);
  const V c1 = two_sum(a.x1, e, e);
  const V c2 = two_sum(a.x2, e, e);
  const V c3 = two_sum(a.x3, e, e);
  return renorm(c0, c1, c2, c3, e, off_path);
}
// qd * double.
SHARDSIM_LANE Q mul(const Q& a, V b, M& off_path) {
  V q0, q1, q2, s2;
  const V p0 = two_prod(a.x0, b, q0);
  const V p1 = two_prod(a.x1, b, q1);
  V p2 = two_prod(a.x2, b, q2);
  V p3 = a.x3 * b;
  const V s1 = two_sum(q0, p1, s2);
  three_sum(s2, q1, p2);
  three_sum2(q1, q2, p3);
  return renorm(p0, s1, s2, q1, q2 + p2, off_path);
}
// qd_inline.h's sloppy_mul (qd * qd).
SHARDSIM_LANE Q mul(const Q& a, const Q& b, M& off_path) {
  V q0, q1, q2, q3, q4, q5, t0, t1;
  const V p0 = two_prod(a.x0, b.x0, q0);
  V p1 = two_prod(a.x0, b.x1, q1), p2 = two_prod(a.x1, b.x0, q2);
  V p3 = two_prod(a.x0, b.x2, q3), p4 = two_prod(a.x1, b.x1, q4), p5 = two_prod(a.x2, b.x0, q5);
  three_sum(p1, p2, q0);
  three_sum(p2, q1, q2);
  three_sum(p3, p4, p5);
  const V s0 = two_sum(p2, p3, t0);
  V s1 = two_sum(q1, p4, t1);
  V s2 = q2 + p5;
  s1 = two_sum(s1, t0, t0);
  s2 += (t0 + t1);
  s1 += a.x0 * b.x3 + a.x1 * b.x2 + a.x2 * b.x1 + a.x3 * b.x0 + q0 + q3 + q4 + q5;
  return renorm(p0, p1, s0, s1, s2, off_path);
}
// qd_inline.h's sqr.
SHARDSIM_LANE Q sqr(const Q& a, M& off_path) {
  V q0, q1, q2, q3, t0, t1;
  const V p0 = two_sqr(a.x0, q0);
  V p1 = two_prod(2.0 * a.x0, a.x1, q1);
  V p2 = two_prod(2.0 * a.x0, a.x2, q2);
  V p3 = two_sqr(a.x1, q3);
  p1 = two_sum(q0, p1, q0);
  q0 = two_sum(q0, q1, q1);
  p2 = two_sum(p2, p3, p3);
  const V s0 = two_sum(q0, p2, t0);
  V s1 = two_sum(q1, p3, t1);
  s1 = two_sum(s1, t0, t0);
  t0 += t1;
  s1 = quick_two_sum(s1, t0, t0);
  p2 = quick_two_sum(s0, s1, t1);
  p3 = quick_two_sum(t1, t0, q0);
  V p4 = 2.0 * a.x0 * a.x3;
  V p5 = 2.0 * a.x1 * a.x2;
  p4 = two_sum(p4, p5, p5);
  q2 = two_sum(q2, q3, q3);
  t0 = two_sum(p4, q2, t1);
  t1 = t1 + p5 + q3;
  p3 = two_sum(p3, t0, p4);
  p4 = p4 + q0 + t1;
  return renorm(p0, p1, p2, p3, p4, off_path);
}
SHARDSIM_LANE Q mul_pwr2(const Q& a, double b) { return Q{a.x0 * b, a.x1 * b, a.x2 * b, a.x3 * b}; }

// QD's exp(a) before the final 2^m, for lanes in the domain; off_path marks the lanes to redo.
SHARDSIM_LANE Q exp_lanes(const Q& a, V m, M& off_path) {
  constexpr double kInvK = 1.0 / 65536.0;
  const double thresh = kInvK * qd_real::_eps;
  const Q m_log2 = mul(broadcast(qd_real::_log2), m, off_path);
  const Q r = mul_pwr2(add(a, Q{-m_log2.x0, -m_log2.x1, -m_log2.x2, -m_log2.x3}, off_path), kInvK);
  Q p = sqr(r, off_path);
  Q s = add(r, mul_pwr2(p, 0.5), off_path);
  M active = M{} == 0;  // every lane
  for (int i = 0; i < 9;) {
    M step_off{};
    const Q p_next = mul(p, r, step_off);
    const Q t = mul(p_next, broadcast(detail::kExpInverseFactorial[i]), step_off);
    const Q s_next = add(s, t, step_off);
    p = select(active, p_next, p);
    s = select(active, s_next, s);
    off_path |= step_off & active;
    ++i;
    const V magnitude = select(t.x0 < 0.0, -t.x0, t.x0);
    active &= magnitude > thresh;
    bool any = false;
    for (int k = 0; k < kLanes; ++k) any = any || active[k] != 0;
    if (!any) break;
  }
  for (int j = 0; j < 16; ++j) s = add(mul_pwr2(s, 2.0), sqr(s, off_path), off_path);
  return add(s, broadcast(1.0), off_path);
}

#undef SHARDSIM_LANE

// Whether exp_lanes handles x: QD's exp would run its reduction and series on it.
bool in_lane_domain(const Qd& x) {
  const double a0 = x.term(0);
  if (!(a0 > -709.0 && a0 < 709.0) || a0 == 0.0) return false;
  if (!isfinite(x)) return false;
  return !(a0 == 1.0 && x.term(1) == 0.0 && x.term(2) == 0.0 && x.term(3) == 0.0);
}

// Replaces v[index[k]] for k < count (count <= kLanes, every value in the domain) by its exp.
[[gnu::always_inline]] inline void exp_group(Qd* v, const std::int64_t* index, int count) {
  double terms[4][kLanes], scale[kLanes];
  for (int k = 0; k < kLanes; ++k) {
    const Qd& x = v[index[k < count ? k : 0]];  // spare lanes repeat the first value
    for (int t = 0; t < 4; ++t) terms[t][k] = x.term(t);
    scale[k] = std::floor(x.term(0) / qd_real::_log2.x[0] + 0.5);
  }
  Q a;
  V m;
  std::memcpy(&a.x0, terms[0], sizeof(V));
  std::memcpy(&a.x1, terms[1], sizeof(V));
  std::memcpy(&a.x2, terms[2], sizeof(V));
  std::memcpy(&a.x3, terms[3], sizeof(V));
  std::memcpy(&m, scale, sizeof(V));
  M off_path{};
  const Q s = exp_lanes(a, m, off_path);
  for (int k = 0; k < count; ++k) {
    Qd& out = v[index[k]];
    if (off_path[k] != 0) {
      out = exp(out);  // libqd's
      continue;
    }
    const int e = static_cast<int>(scale[k]);
    out = Qd(qd_real(std::ldexp(s.x0[k], e), std::ldexp(s.x1[k], e), std::ldexp(s.x2[k], e),
                     std::ldexp(s.x3[k], e)));
  }
}

// exp_each's work, run under detail::run_lanes (the AVX2 copy where lane_isa() says so).
[[gnu::always_inline]] inline void exp_values(Qd* v, std::int64_t n) {
  std::int64_t index[kLanes];
  int count = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    if (!in_lane_domain(v[i])) {
      v[i] = exp(v[i]);  // libqd's
      continue;
    }
    index[count++] = i;
    if (count == kLanes) {
      exp_group(v, index, count);
      count = 0;
    }
  }
  if (count > 0) exp_group(v, index, count);
}

// Whether the lanes give QD's bits on arguments that take every part of the algorithm: both
// signs, large and small m, series of 3 to 9 terms, and |r| near its bound.
bool lanes_agree_with_qd() {
  const std::array<Qd, 8> arguments = {
      Qd(qd_real(-0.5, 1e-20, 3e-37, -2e-53)),     Qd(qd_real(-37.25, -1.5e-15, 2e-32, 1e-49)),
      Qd(qd_real(3.0e-5, 1.3e-21, -7e-38, 2e-54)), Qd(qd_real(700.5, 2e-14, 1e-30, -3e-47)),
      Qd(qd_real(-700.5, 2e-14, 1e-30, -3e-47)),   Qd(qd_real(0.34657, 1e-18, 1e-35, 1e-52)),
      Qd(qd_real(-1e-9, 4e-26, 1e-43, 3e-60)),     Qd(qd_real(12.75, -3e-16, 6e-33, -1e-49))};
  std::array<Qd, 8> lanes = arguments;
  detail::run_lanes([&] { exp_values(lanes.data(), static_cast<std::int64_t>(lanes.size())); });
  for (std::size_t i = 0; i < arguments.size(); ++i) {
    const Qd expected = exp(arguments[i]);
    if (std::memcmp(&expected, &lanes[i], sizeof expected) != 0) return false;
  }
  return true;
}

// Whether the lanes of the instruction set in use passed the self-check, run once for each.
// (lane_isa() is read again by run_lanes; only tests and tools/bench change it, between calls.)
bool lanes_pass() {
  if (lane_isa() == LaneIsa::avx2) {
    static const bool avx2_ok = lanes_agree_with_qd();
    return avx2_ok;
  }
  static const bool baseline_ok = lanes_agree_with_qd();
  return baseline_ok;
}

}  // namespace

bool exp_each_uses_lanes() { return lanes_pass(); }

void exp_each(Qd* v, std::int64_t n) {
  if (!lanes_pass()) {
    exp_each<Qd>(v, n);  // scalar.hpp's loop over libqd's exp
    return;
  }
  detail::run_lanes([&] { exp_values(v, n); });
}

}  // namespace shardsim
