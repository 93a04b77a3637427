// Signatures read from one boundary's values alone: constant_ratio, constant_fill, hidden_cast.
#include <algorithm>
#include <cmath>
#include <set>

#include "diagnosis/signatures.hpp"
#include "diagnosis/format.hpp"

namespace shardsim {

namespace {

using diag::num;

struct Gap {
  double sharded;
  double dense;
};

// The held elements that differ from the dense value, with both values finite.
std::vector<Gap> differing(const Observed& o) {
  std::vector<Gap> out;
  if (o.dense.empty()) return out;
  for (const Held& h : held_elements(o)) {
    const double d = o.dense[static_cast<std::size_t>(h.global)];
    if (h.sharded != d && std::isfinite(h.sharded) && std::isfinite(d))
      out.push_back({h.sharded, d});
  }
  return out;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

double quantile(std::vector<double> values, double q) {
  std::sort(values.begin(), values.end());
  return values[static_cast<std::size_t>(q * static_cast<double>(values.size() - 1))];
}

struct RatioForm {
  double value;
  std::string text;
  Cause cause;
  double confidence;
};

// The ratios a named count n explains, strongest first.
std::vector<RatioForm> forms_of(const NamedCount& count) {
  const double n = static_cast<double>(count.value);
  const std::string ns = std::to_string(count.value), m = std::to_string(count.value - 1);
  const std::string of = " (" + count.name + ")";
  const std::string unbiased = ": the unbiased variance factor H/(H-1) with H = " + ns + of;
  return {{1 / n, "1/" + ns + of, Cause::wrong_divisor, 0.9},
          {n, ns + of, Cause::wrong_divisor, 0.9},
          {(n - 1) / n, m + "/" + ns + unbiased, Cause::normalization_convention, 0.85},
          {n / (n - 1), ns + "/" + m + unbiased, Cause::normalization_convention, 0.85},
          {std::sqrt((n - 1) / n), "sqrt(" + m + "/" + ns + ")" + unbiased,
           Cause::normalization_convention, 0.85},
          {std::sqrt(n / (n - 1)), "sqrt(" + ns + "/" + m + ")" + unbiased,
           Cause::normalization_convention, 0.85}};
}

}  // namespace

Finding constant_ratio(const Observed& o, const std::vector<NamedCount>& counts, double unit) {
  Finding f{.signature = "constant_ratio", .cause = Cause::wrong_divisor};
  std::vector<double> ratios;
  std::set<std::int64_t> elements;  // distinct global elements (replicas count once)
  for (const Held& h : held_elements(o)) {
    const double d = o.dense.empty() ? 0 : o.dense[static_cast<std::size_t>(h.global)];
    if (h.sharded == d || d == 0 || !std::isfinite(h.sharded) || !std::isfinite(d)) continue;
    ratios.push_back(h.sharded / d);
    elements.insert(h.global);
  }
  if (ratios.empty()) {
    f.evidence = "no differing element with a nonzero dense value";
    return f;
  }
  const double center = median(ratios);
  double spread = 0;
  for (double r : ratios) spread = std::max(spread, diag::rel(r, center));
  const std::string where = " at all " + std::to_string(elements.size()) +
                            " differing elements (spread " + num(spread) + ")";
  if (center == 0 || spread > std::max(64 * unit, 1e-6)) {
    f.evidence = "sharded/dense is not one constant: it spans " +
                 num(*std::min_element(ratios.begin(), ratios.end())) + " .. " +
                 num(*std::max_element(ratios.begin(), ratios.end()));
    return f;
  }
  if (diag::rel(center, 1) <= std::max(4 * spread, 1e-6)) {
    f.evidence = "sharded/dense = 1 + " + num(center - 1) + ": no constant factor";
    return f;
  }
  const double tolerance = std::max({4 * spread, 64 * unit, 1e-6});
  const std::string head = "sharded/dense = " + num(center) + " = ";
  for (const NamedCount& count : counts) {
    if (count.value < 2) continue;
    for (const RatioForm& form : forms_of(count)) {
      if (diag::rel(center, form.value) > tolerance) continue;
      f.cause = form.cause;
      f.confidence = form.confidence;
      f.evidence = head + form.text + where;
      return f;
    }
  }
  for (int k = 2; k <= 64; ++k) {
    for (double value : {1.0 / k, double(k)}) {
      if (diag::rel(center, value) > tolerance) continue;
      f.confidence = 0.6;
      f.evidence = head + (value < 1 ? "1/" : "") + std::to_string(k) + where +
                   ", a count the program does not name";
      return f;
    }
  }
  // One element is always "constant": only a named or integer factor says anything there.
  f.confidence = elements.size() >= 2 ? 0.35 : 0;
  f.evidence = "sharded/dense = " + num(center) + ", one unexplained constant factor" + where;
  return f;
}

Finding constant_fill(const Observed& o) {
  Finding f{.signature = "constant_fill", .cause = Cause::default_value};
  const std::vector<Held> held = held_elements(o);
  if (o.dense.empty() || held.empty()) {
    f.evidence = "no oracle values to compare";
    return f;
  }
  const double value = held.front().sharded;
  double low = INFINITY, high = -INFINITY;
  bool differs = false;
  for (const Held& h : held) {
    if (h.sharded != value) {
      f.evidence = "the sharded values are not one constant";
      return f;
    }
    const double d = o.dense[static_cast<std::size_t>(h.global)];
    low = std::min(low, d);
    high = std::max(high, d);
    differs = differs || d != value;
  }
  if (!differs || low == high) {
    f.evidence = "the dense values are constant too";
    return f;
  }
  const bool default_init = value == 0 || value == 1;
  f.confidence = default_init ? 0.8 : 0.55;
  f.evidence = "every sharded value of " + o.entry.tensor + " is " + num(value) + " (" +
               std::to_string(held.size()) + " elements) while the dense values span [" + num(low) +
               ", " + num(high) + "]" +
               (default_init ? ": a default ones/zeros value in place of the data" : "");
  return f;
}

namespace {

// Whether v is representable with `bits` significand bits (exponent range ignored).
bool representable(double v, int bits) {
  if (v == 0 || !std::isfinite(v)) return true;
  int exponent = 0;
  const double mantissa = std::frexp(v, &exponent);  // in [0.5, 1)
  const double scaled = std::ldexp(mantissa, bits);
  return scaled == std::nearbyint(scaled);
}

}  // namespace

Finding hidden_cast(const Observed& o, unsigned run_bits) {
  Finding f{.signature = "hidden_cast", .cause = Cause::hidden_cast};
  const std::vector<Gap> gaps = differing(o);
  std::vector<double> rels;
  for (const Gap& g : gaps) {
    if (g.dense != 0) rels.push_back(std::fabs(g.sharded - g.dense) / std::fabs(g.dense));
  }
  if (rels.empty()) {
    f.evidence = "no differing element with a nonzero dense value";
    return f;
  }
  const double med = median(rels);
  const double high = quantile(rels, 0.9);
  struct Narrow {
    const char* name;
    int bits;
  };
  for (const Narrow narrow : {Narrow{"f32", 24}, Narrow{"f16", 11}, Narrow{"bf16", 8}}) {
    if (static_cast<unsigned>(narrow.bits) >= run_bits) continue;
    const double top = std::ldexp(1.0, 1 - narrow.bits);
    if (!(high <= top && med <= top && med >= std::ldexp(1.0, -narrow.bits - 4))) continue;
    std::size_t exact = 0, dense_exact = 0;
    for (const Gap& g : gaps) {
      exact += representable(g.sharded, narrow.bits) ? 1 : 0;
      dense_exact += representable(g.dense, narrow.bits) ? 1 : 0;
    }
    if (dense_exact == gaps.size()) continue;  // the dense values are narrow already
    const bool narrow_values = 10 * exact >= 9 * gaps.size();
    if (narrow.bits < 24 && 2 * exact < gaps.size()) continue;
    f.confidence = narrow_values ? 0.95 : 0.8;
    f.evidence =
        "relative gap median " + diag::pow2(med) + ", 90th percentile " + diag::pow2(high) +
        " in a " + std::to_string(run_bits) + "-bit run: the rounding of " + narrow.name + " (2^-" +
        std::to_string(narrow.bits) + "); " + std::to_string(exact) + " of " +
        std::to_string(gaps.size()) + " differing sharded values are " + narrow.name + " numbers";
    return f;
  }
  f.evidence = "relative gap median " + diag::pow2(med) + ": not the rounding of f32, f16 or bf16";
  return f;
}

}  // namespace shardsim
