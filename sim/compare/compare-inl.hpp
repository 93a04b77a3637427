// The comparator: a BoundarySink that measures every boundary against the oracle.
#pragma once

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>
#include <type_traits>
#include <vector>

#include "compare/compare.hpp"
#include "core/narrow_float.hpp"
#include "core/parallel.hpp"
#include "core/scalar.hpp"
#include "compare/capture-inl.hpp"

namespace shardsim {

template <typename T>
class Comparator final : public BoundarySink<T> {
 public:
  // `narrow`: a narrow run's format, in whose units a stored boundary's max_ulp is counted.
  // `capture_exact`: with `capture`, keep the exact text of mp/dd/qd values too.
  explicit Comparator(Magnitude rtol, bool capture = false,
                      std::optional<NarrowFormat> narrow = std::nullopt, bool capture_exact = true)
      : rtol_(rtol), capture_(capture), capture_exact_(capture_exact), narrow_(narrow) {}

  bool on_boundary(const TraceEntry& entry, const Tensor<T>* dense,
                   const DistTensor<T>& sharded) override {
    BoundaryResult result;
    result.entry = entry;
    result.rtol = rtol_;
    if (dense) measure(*dense, sharded, result);
    if (capture_) {
      auto captured = std::make_shared<CapturedBoundary>();
      captured->has_dense = dense != nullptr;
      captured->exact_text =
          capture_exact_ && !std::is_floating_point_v<T> && !std::is_same_v<T, NarrowFloat>;
      if (dense) captured->dense = capture_values(*dense, capture_exact_);
      for (int r = 0; r < sharded.ranks(); ++r) {
        captured->ranks.push_back(capture_values(sharded.local(r), capture_exact_));
      }
      result.captured = std::move(captured);
    }
    const bool identical = result.status == Status::exact;
    results_.push_back(std::move(result));
    return identical;
  }

  bool on_boundary_blocks(const TraceEntry& entry, const DistTensor<T>& sharded,
                          OracleBlockFeed<T>& feed) override {
    SHARDSIM_ASSERT(!capture_, "a distributed oracle's boundaries are not captured");
    BoundaryResult result;
    result.entry = entry;
    result.rtol = rtol_;
    measure_blocks(sharded, feed, result);
    const bool identical = result.status == Status::exact;
    results_.push_back(std::move(result));
    return identical;
  }

  std::vector<BoundaryResult>& results() { return results_; }

  void on_activation_memory(const ActivationMemory& memory) override { activation_ = memory; }
  ActivationMemory& activation() { return activation_; }

 private:
  using Traits = ScalarTraits<T>;

  // Visits every compared element of rank r: (rank, local flat index, global flat index, sharded
  // value). Padding is skipped; a Replicate dim's copies are each visited (at every rank); the
  // addends of Partial dims are summed in rank order first (into partial_sum), and the sum is
  // visited at the rank that stands for it (represents_value).
  template <typename Visit>
  static void for_each_element_of(const DistTensor<T>& sharded, int r, Tensor<T>& partial_sum,
                                  Visit visit) {
    if (!represents_value(sharded, r)) return;
    const Tensor<T>* local = &sharded.local(r);
    if (sharded.layout.has_partial()) {
      const std::vector<int> members = partial_members(sharded, r);
      partial_sum = sharded.local(members.front());
      for (std::size_t m = 1; m < members.size(); ++m) {
        const Tensor<T>& addend = sharded.local(members[m]);
        for (std::int64_t e = 0; e < partial_sum.numel(); ++e) partial_sum[e] += addend[e];
      }
      local = &partial_sum;
    }
    for_each_valid(local->shape(), local_box(sharded, r), sharded.global,
                   [&](std::int64_t local_flat, std::int64_t global_flat) {
                     visit(r, local_flat, global_flat, (*local)[local_flat]);
                   });
  }

  // The same visit over one block of rows of a distributed oracle (oracle_rows.hpp): the ranks'
  // values come from the block's pieces, the addends of a Partial value summed in the same order.
  template <typename Visit>
  static void for_each_element_in(const DistTensor<T>& sharded, const OracleBlock<T>& block,
                                  Visit visit) {
    const std::size_t axis = sharded.global.position(block.rows.axis);
    for (int r = 0; r < sharded.ranks(); ++r) {
      if (!represents_value(sharded, r)) continue;
      const std::vector<int> members = partial_members(sharded, r);
      const std::vector<T>& own = block.pieces[static_cast<std::size_t>(members.front())];
      std::size_t k = 0;
      T sum;
      for_each_valid_in_rows(
          local_shape(sharded.global, sharded.layout, *sharded.mesh, r), local_box(sharded, r),
          sharded.global, axis, block.rows.begin, block.rows.end,
          [&](std::int64_t local_flat, std::int64_t global_flat) {
            SHARDSIM_ASSERT(k < own.size(), "a block's piece is shorter than its rows");
            if (members.size() == 1) {
              visit(r, local_flat, global_flat, own[k]);
            } else {
              sum = own[k];
              for (std::size_t m = 1; m < members.size(); ++m) {
                const std::vector<T>& addends = block.pieces[static_cast<std::size_t>(members[m])];
                SHARDSIM_ASSERT(k < addends.size(), "a block's addends are shorter than its rows");
                sum += addends[k];
              }
              visit(r, local_flat, global_flat, sum);
            }
            ++k;
          });
    }
  }

  // The running verdict of one boundary's elements. Elements may arrive out of the visit order
  // (a distributed oracle's blocks): the first divergence is the smallest (rank, local flat).
  struct Tally {
    BoundaryResult& result;
    Magnitude allowed;
    bool all_identical = true;
    bool all_within = true;
    std::optional<Divergence> first_not_identical;
    std::optional<Divergence> first_outside;
    std::pair<int, std::int64_t> not_identical_at{INT_MAX, 0};
    std::pair<int, std::int64_t> outside_at{INT_MAX, 0};
  };

  // One element: rank `rank`'s value `s` at its local position `local_flat` against the dense
  // value `d` at `global_flat` of the boundary's global shape `global`.
  void tally(Tally& t, const Shape& global, int rank, std::int64_t local_flat,
             std::int64_t global_flat, const T& s, const T& d) const {
    if (Traits::identical(s, d)) return;
    BoundaryResult& result = t.result;
    const ElementError err = element_error(s, d);
    raise(result.max_abs, err.abs);
    raise(result.max_rel, err.rel);
    result.max_ulp = std::max(result.max_ulp, ulp(s, d, result.entry.narrow));
    const std::pair<int, std::int64_t> at{rank, local_flat};
    t.all_identical = false;
    if (at < t.not_identical_at) {
      t.not_identical_at = at;
      t.first_not_identical = divergence_at(
          global, global_flat, d, rank, s,
          err.reason == "NaN" ? "NaN, which never matches"
                              : "not bitwise equal at a boundary that claims exactness");
    }
    if (!(err.abs <= t.allowed)) {
      t.all_within = false;
      if (at < t.outside_at) {
        t.outside_at = at;
        t.first_outside = divergence_at(global, global_flat, d, rank, s, err.reason);
      }
    }
  }

  void conclude(Tally& t) const {
    BoundaryResult& result = t.result;
    if (t.all_identical) {
      result.status = Status::exact;
    } else if (result.entry.exact) {
      result.status = Status::fail;
      result.first_bad = t.first_not_identical;
    } else if (t.all_within) {
      result.status = Status::within;
    } else {
      result.status = Status::fail;
      result.first_bad = t.first_outside;
    }
    if (result.first_bad) {
      Divergence& div = *result.first_bad;
      div.boundary = result.entry.id;
      div.step = result.entry.step;
      div.chunk = result.entry.chunk;
      div.micro = result.entry.micro;
      div.micro_count = result.entry.micro_count;
      div.op = result.entry.op;
      div.tensor = result.entry.tensor;
    }
  }

  // The ranks are tallied concurrently (parallel.hpp), each into its own maxima and first
  // divergences, merged in rank order: maxima ignore NaN and keep the first of equal values, and
  // a first divergence is the smallest (rank, local flat), so the result is the sequential one
  // for every thread count.
  void measure(const Tensor<T>& dense, const DistTensor<T>& sharded, BoundaryResult& result) {
    SHARDSIM_ASSERT(dense.shape() == sharded.global, "boundary shape differs from the oracle's");
    const Magnitude scale = max_finite_magnitude(dense);
    result.scale = scale;
    const bool partial = sharded.layout.has_partial();
    const double addends = partial ? partial_addend_scale(sharded) : 0.0;
    const Magnitude allowed = rtol_ * noise_scale(scale, partial, addends, result.entry);
    const int ranks = sharded.ranks();
    std::vector<BoundaryResult> parts(static_cast<std::size_t>(ranks));
    std::vector<Tally> tallies;
    tallies.reserve(static_cast<std::size_t>(ranks));
    for (BoundaryResult& part : parts) {
      part.entry = result.entry;
      tallies.push_back(Tally{part, allowed});
    }
    parallel_for(ranks, [&](std::int64_t r) {
      Tally& t = tallies[static_cast<std::size_t>(r)];
      Tensor<T> partial_sum;
      for_each_element_of(sharded, static_cast<int>(r), partial_sum,
                          [&](int rank, std::int64_t local_flat, std::int64_t flat, const T& s) {
                            tally(t, dense.shape(), rank, local_flat, flat, s, dense[flat]);
                          });
    });
    Tally t{result, allowed};
    for (int r = 0; r < ranks; ++r) {
      const Tally& part = tallies[static_cast<std::size_t>(r)];
      raise(result.max_abs, part.result.max_abs);
      raise(result.max_rel, part.result.max_rel);
      result.max_ulp = std::max(result.max_ulp, part.result.max_ulp);
      t.all_identical = t.all_identical && part.all_identical;
      t.all_within = t.all_within && part.all_within;
      if (part.not_identical_at < t.not_identical_at) {
        t.not_identical_at = part.not_identical_at;
        t.first_not_identical = part.first_not_identical;
      }
      if (part.outside_at < t.outside_at) {
        t.outside_at = part.outside_at;
        t.first_outside = part.first_outside;
      }
    }
    conclude(t);
  }

  // measure() over a distributed oracle's blocks. The scale is the feed's largest |value| (the
  // magnitude of the largest value is the largest magnitude: rounding is monotone).
  void measure_blocks(const DistTensor<T>& sharded, OracleBlockFeed<T>& feed,
                      BoundaryResult& result) {
    Magnitude scale;
    if (const T* max = feed.max_abs()) scale = magnitude_of(*max);
    result.scale = scale;
    const bool partial = sharded.layout.has_partial();
    double own = 0;
    if (partial) {
      // partial_addend_scale, block by block: max over elements of sum |addend|.
      feed.stream(false, [&](const OracleBlock<T>& block) {
        for (int r = 0; r < sharded.ranks(); ++r) {
          if (!represents_value(sharded, r)) continue;
          const std::vector<int> members = partial_members(sharded, r);
          const std::size_t n = block.pieces[static_cast<std::size_t>(r)].size();
          for (int m : members) {
            SHARDSIM_ASSERT(block.pieces[static_cast<std::size_t>(m)].size() == n,
                            "a block's addends differ in length");
          }
          for (std::size_t e = 0; e < n; ++e) {
            double sum = 0;
            for (int m : members) {
              sum += std::fabs(Traits::to_double(block.pieces[static_cast<std::size_t>(m)][e]));
            }
            if (std::isfinite(sum)) own = std::max(own, sum);
          }
        }
      });
    }
    Tally t{result, rtol_ * noise_scale(scale, partial, own, result.entry)};
    feed.stream(true, [&](const OracleBlock<T>& block) {
      SHARDSIM_ASSERT(block.dense && block.dense->shape() == block.rows.of(sharded.global),
                      "a block's shape differs from its rows of the boundary");
      const RowsIndex index(sharded.global, block.rows);
      for_each_element_in(sharded, block,
                          [&](int rank, std::int64_t local_flat, std::int64_t flat, const T& s) {
                            tally(t, sharded.global, rank, local_flat, flat, s,
                                  (*block.dense)[index.to_block(flat)]);
                          });
    });
    conclude(t);
  }

  // The noise scale: a value computed from a sum of Partial addends carries the rounding of the
  // addends' magnitudes, not of the (possibly cancelled) result's, so the tolerance is relative
  // to the larger of max |d| (`scale`) and the largest sum of absolute addends of any Partial
  // input (addend_scale). Without it a correct reduction of cancelling gradients (training near
  // convergence) fails a tolerance relative to its tiny result. A Partial boundary records its
  // own addend scale for the boundaries that read it.
  // `own`: the boundary's own partial_addend_scale when it is `partial`.
  Magnitude noise_scale(Magnitude scale, bool partial, double own_addends,
                        const TraceEntry& entry) {
    Magnitude noise = scale;
    for (const std::string& input : entry.inputs) {
      auto found = addend_scale_.find(input);
      if (found != addend_scale_.end()) raise(noise, found->second);
    }
    if (partial) {
      const Magnitude own = Magnitude::of(own_addends);
      raise(noise, own);
      addend_scale_[entry.tensor] = own;
    }
    return noise;
  }

  // max into `into`, ignoring a NaN `value` as std::max(into, value) does (a NaN max_rel, from an
  // infinite or NaN oracle value, leaves the maximum as it was).
  static void raise(Magnitude& into, const Magnitude& value) {
    if (into < value) into = value;
  }

  static Magnitude magnitude_of(const T& v) { return value_magnitude(v); }
  static Magnitude abs_difference(const T& s, const T& d) { return value_abs_difference(s, d); }

  // The error of one sharded value `s` against its dense value `d` (not bitwise equal).
  // rel = abs / |d|: inf for d = 0, NaN (ignored by raise) for an infinite or NaN d.
  struct ElementError {
    Magnitude abs;
    Magnitude rel;
    std::string reason;
  };
  static ElementError element_error(const T& s, const T& d) {
    using std::isinf;
    using std::isnan;
    ElementError err;
    if (isnan(s) || isnan(d)) {
      err.abs = Magnitude::infinity();
      err.reason = "NaN";
    } else if (isinf(s) || isinf(d)) {
      err.abs = s == d ? Magnitude() : Magnitude::infinity();
      err.reason = "infinity";
    } else {
      err.abs = abs_difference(s, d);
      err.reason = "outside tolerance";
    }
    const Magnitude dm = magnitude_of(d);
    err.rel = dm.is_zero() ? Magnitude::infinity() : err.abs / dm;
    return err;
  }

  // The divergence at element `flat` of a tensor of shape `global` (dense value `d`; rank `rank`
  // holds `s`), located by named axes.
  static Divergence divergence_at(const Shape& global, std::int64_t flat, const T& d, int rank,
                                  const T& s, std::string why) {
    Divergence div;
    div.rank = rank;
    const std::vector<std::int64_t> index = unflatten(global, flat);
    for (std::size_t a = 0; a < index.size(); ++a) {
      div.index.emplace_back(global[a].name, index[a]);
    }
    set_values(div, d, s);
    div.reason = std::move(why);
    return div;
  }

  static void set_values(Divergence& div, const T& dense, const T& sharded) {
    div.dense = Traits::to_double(dense);
    div.sharded = Traits::to_double(sharded);
    if constexpr (kIsExpansion<T>) {
      std::tie(div.dense_text, div.sharded_text) = expansion_distinguishing_texts(dense, sharded);
    } else if constexpr (!std::is_floating_point_v<T> && !std::is_same_v<T, NarrowFloat>) {
      // mp: the doubles may print alike
      std::tie(div.dense_text, div.sharded_text) = distinguishing_texts(dense, sharded);
    }
  }

  // ULP distance in the run's scalar type, or in the narrow format for a stored boundary.
  double ulp(const T& s, const T& d, bool stored_narrow) const {
    if (!narrow_ || !stored_narrow) return Traits::ulp(s, d);
    const std::uint64_t units =
        narrow_ulp_distance(*narrow_, narrow_from_double(*narrow_, Traits::to_double(s)),
                            narrow_from_double(*narrow_, Traits::to_double(d)));
    return units == UINT64_MAX ? static_cast<double>(kUlpNaN) : static_cast<double>(units);
  }

  Magnitude rtol_;
  bool capture_;
  bool capture_exact_;
  std::optional<NarrowFormat> narrow_;
  std::map<std::string, Magnitude> addend_scale_;  // Partial tensor -> partial_addend_scale
  std::vector<BoundaryResult> results_;
  ActivationMemory activation_;
};

}  // namespace shardsim

