// Dropout with a counter-based mask (rng.hpp has the exact mapping), per-rank kernel and dense
// oracle.
//
//   scale = T(1) / (T(1) - T(p))          computed in the run's type; T(p) is p rounded to T
//   y     = x * scale   where kept,  +0 where dropped
//   dx    = dy * scale  where kept,  +0 where dropped     (written, not accumulated)
// p = 0 keeps everything with scale exactly 1, so y == x bitwise: dropout disabled.
//
// The mask depends only on the element's identity, never on values, so a rank computes its
// mask from its local shape and its frame (where its shard sits in the global tensor). Under the
// global policy that is exactly the dense mask's slice; the other policies are the seeded bugs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/placement.hpp"
#include "core/rng.hpp"
#include "core/tensor.hpp"

namespace shardsim {

struct DropoutParams {
  double p = 0;                     // drop probability, 0 <= p < 1
  std::uint64_t seed = 0;
  std::uint32_t stream = 0;         // distinguishes dropout sites
  std::uint32_t forward_pass = 1;  // 1-based (rng.hpp); fresh masks every pass
};

// Where one rank's local tensor sits in the global one. An empty axis means the local tensor is
// the whole global tensor (Replicate, or the dense oracle).
struct DropoutFrame {
  Shape global;
  // Per axis of `global`: the global range the local tensor holds (begin, end) and its local
  // extent (positions >= end - begin are padding). Empty: the local tensor is the global one.
  std::vector<Slice> box;
  int rank = 0;
};

// What forward keeps for backward: one byte per element, as a real backend's bool mask.
struct DropoutMask {
  std::vector<std::uint8_t> keep;   // (local shape), row-major: 1 keep, 0 drop
  std::vector<std::uint8_t> valid;  // (local shape): 0 on padding positions (always dropped)
};

// The mask of a local tensor of shape `local` under `policy` (rng.hpp).
DropoutMask dropout_mask(const Shape& local, const DropoutFrame& frame,
                         const DropoutParams& params, DropoutPolicy policy);

// The words behind a local mask, for the repetition detector: `drawn` holds the words the rank
// draws under `policy` and `dense` the words the dense program (policy global) draws for the same
// elements, both in local flat order with padding positions skipped. `at` holds each word's local
// flat index once a padding position has been skipped (empty: word i is at index i).
struct DrawnWords {
  std::vector<std::uint32_t> drawn;
  std::vector<std::uint32_t> dense;
  std::vector<std::int64_t> at;
};
DrawnWords dropout_words(const Shape& local, const DropoutFrame& frame, const DropoutParams& params,
                         DropoutPolicy policy);

template <typename T>
T dropout_scale(double p) {
  return T(1) / (T(T(1) - T(p)));
}

// REQUIRES: mask.keep.size() == x.numel().
template <typename T>
void dropout_forward(const Tensor<T>& x, const DropoutMask& mask, double p, Tensor<T>& y);

template <typename T>
void dropout_backward(const Tensor<T>& dy, const DropoutMask& mask, double p, Tensor<T>& dx);

// The mask as values 1 (keep) and 0 (drop), for recording and goldens.
template <typename T>
Tensor<T> mask_values(const Shape& shape, const DropoutMask& mask);

}  // namespace shardsim
