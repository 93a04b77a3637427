// Signatures of attention positions: rope_rotation (RoPE angles) and window_mask (mask bounds).
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numbers>
#include <optional>

#include "diagnosis/signatures.hpp"
#include "diagnosis/format.hpp"

namespace shardsim {

namespace {

using diag::num;

// The sharded value of every global element (its first holder's), NaN where none holds it, and
// the rank holding it.
void sharded_global(const Observed& o, std::vector<double>& value, std::vector<int>& rank) {
  value.assign(o.dense.size(), std::numeric_limits<double>::quiet_NaN());
  rank.assign(o.dense.size(), -1);
  for (const Held& h : held_elements(o)) {
    if (rank[static_cast<std::size_t>(h.global)] >= 0) continue;
    value[static_cast<std::size_t>(h.global)] = h.sharded;
    rank[static_cast<std::size_t>(h.global)] = h.rank;
  }
}

double wrap(double angle) { return std::remainder(angle, 2 * std::numbers::pi); }

// One token's head_dim vector: the plane angles from the dense vector to the sharded one, or
// nothing when some plane's norm differs (not a rotation).
struct TokenAngles {
  std::vector<double> phi;
  std::vector<bool> weighs;  // planes with a nonzero dense norm
};

std::optional<TokenAngles> angles(const std::vector<double>& dense, const std::vector<double>& s,
                                  const std::function<std::size_t(std::int64_t)>& at,
                                  std::int64_t planes, bool interleaved, double norm_tol) {
  TokenAngles out;
  for (std::int64_t i = 0; i < planes; ++i) {
    const std::int64_t a = interleaved ? 2 * i : i;
    const std::int64_t b = interleaved ? 2 * i + 1 : i + planes;
    const double da = dense[at(a)], db = dense[at(b)], sa = s[at(a)], sb = s[at(b)];
    const double nd = std::hypot(da, db), ns = std::hypot(sa, sb);
    if (std::fabs(nd - ns) > norm_tol * std::max(nd, 1e-300) + 1e-300) return std::nullopt;
    out.weighs.push_back(nd > 1e-6);
    out.phi.push_back(std::atan2(da * sb - db * sa, da * sa + db * sb));
  }
  return out;
}

// The integer position shift whose angles shift * freq_i fit every weighed plane within
// `tolerance` (the best over |shift| <= max_shift), or nothing.
std::optional<std::int64_t> fitted_shift(const TokenAngles& t, const std::vector<double>& freq,
                                         std::int64_t max_shift, double tolerance) {
  std::int64_t best = 0;
  double best_residual = INFINITY;
  for (std::int64_t shift = -max_shift; shift <= max_shift; ++shift) {
    double residual = 0;
    for (std::size_t i = 0; i < freq.size(); ++i) {
      if (!t.weighs[i]) continue;
      residual =
          std::max(residual, std::fabs(wrap(t.phi[i] - static_cast<double>(shift) * freq[i])));
    }
    if (residual < best_residual) {
      best_residual = residual;
      best = shift;
    }
  }
  if (best_residual > tolerance) return std::nullopt;
  return best;
}

}  // namespace

Finding rope_rotation(const Observed& o, const RopeGeometry& rope, double unit) {
  Finding f{.signature = "rope_rotation", .cause = Cause::position_offset};
  const Shape& shape = o.entry.global;
  if (o.dense.empty() || !shape.has(rope.dim_axis) || !shape.has(rope.pos_axis) ||
      shape.extent(rope.dim_axis) % 2 != 0) {
    f.evidence = "n/a: no " + rope.pos_axis + " and even " + rope.dim_axis + " axes";
    return f;
  }
  std::vector<double> s;
  std::vector<int> owner;
  sharded_global(o, s, owner);
  const AxisView dim = AxisView::of(shape, rope.dim_axis);
  const std::int64_t planes = dim.extent / 2;
  std::vector<double> freq;
  for (std::int64_t i = 0; i < planes; ++i) {
    freq.push_back(
        std::pow(rope.theta, -2.0 * static_cast<double>(i) / static_cast<double>(dim.extent)));
  }
  const double angle_tol = 1e-6 + 1024 * unit * static_cast<double>(1 + rope.max_shift);
  const bool sharded_pos =
      placement_1d(o.entry).is_shard() && placement_1d(o.entry).axis == rope.pos_axis;
  std::map<std::int64_t, int> shifts;                  // shift -> tokens
  int tokens = 0, rotated = 0, fitted = 0, local = 0;  // local: shifted by -(shard offset)
  for (std::int64_t outer = 0; outer < dim.outer; ++outer) {
    for (std::int64_t inner = 0; inner < dim.inner; ++inner) {
      auto at = [&](std::int64_t i) { return static_cast<std::size_t>(dim.flat(outer, i, inner)); };
      bool differs = false;
      for (std::int64_t i = 0; i < dim.extent; ++i) differs = differs || s[at(i)] != o.dense[at(i)];
      if (!differs || std::isnan(s[at(0)])) continue;
      ++tokens;
      const auto token = angles(o.dense, s, at, planes, rope.interleaved, kFitUlps * unit);
      if (!token) continue;
      ++rotated;
      const auto shift = fitted_shift(*token, freq, rope.max_shift, angle_tol);
      if (!shift || *shift == 0) continue;
      ++fitted;
      ++shifts[*shift];
      if (sharded_pos) {
        // Rotated by minus the shard's offset: the shard used positions from its own start.
        const Slice slice = rank_slice(shape, placement_1d(o.entry),
                                       static_cast<int>(o.ranks.size()), owner[at(0)]);
        local += *shift == -slice.begin ? 1 : 0;
      }
    }
  }
  if (tokens == 0 || rotated < tokens) {
    f.evidence = std::to_string(rotated) + " of " + std::to_string(tokens) +
                 " differing tokens are rotations of the dense ones (pair norms equal)";
    return f;
  }
  if (fitted < tokens) {
    f.confidence = 0.5;
    f.evidence =
        "every differing token is the dense one rotated plane by plane (pair norms "
        "equal), by angles that are no integer position shift";
    return f;
  }
  const std::string head = "all " + std::to_string(tokens) +
                           " differing tokens are the dense ones rotated (pair norms equal) by ";
  if (local == tokens) {
    f.confidence = 0.95;
    f.evidence = head + "minus their shard's offset along " + rope.pos_axis +
                 ": positions counted from each shard's start (local instead of global)";
  } else if (shifts.size() == 1) {
    f.confidence = 0.9;
    f.evidence = head + "one position shift " + (shifts.begin()->first > 0 ? "+" : "") +
                 std::to_string(shifts.begin()->first) + " along " + rope.pos_axis;
  } else {
    f.confidence = 0.6;
    f.evidence = head + std::to_string(shifts.size()) + " different position shifts (" +
                 std::to_string(shifts.begin()->first) + " .. " +
                 std::to_string(shifts.rbegin()->first) + ") along " + rope.pos_axis;
  }
  return f;
}

}  // namespace shardsim
