// Masked mean-squared-error loss over valid (non-padding) tokens.
//
//   loss = (1 / V) * sum over valid tokens t of sum_h (y[t,h] - target[t,h])^2
//
// V is the GLOBAL count of valid tokens, and the division happens exactly once. A token (b, s) is
// valid iff s < valid_lengths[b] (all tokens are valid when valid_lengths is empty), or, when an
// explicit mask is given, iff token_valid[b][s]. (b, s) is the token's GLOBAL identity: local
// positions are mapped through the LocalFrame, so the mask follows the token to whichever rank
// holds it. Padding
// tokens still pass through earlier ops; they contribute nothing to the loss or any gradient.
//
// Summation order: tokens in row-major order of the non-feature axes; within a token, features
// in ascending order are summed first, then the token's sum is added to the running total.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shardsim/tensor.hpp"

namespace shardsim {

struct MaskedMseParams {
  std::string batch_axis = "batch";
  std::string seq_axis = "seq";
  std::string feature_axis = "hidden";
  std::vector<std::int64_t> valid_lengths;  // one per batch element; empty: all valid
  // An explicit mask by global token identity, token_valid[b][s] != 0 iff token (b, s) is
  // valid. When non-empty it replaces valid_lengths.
  std::vector<std::vector<std::uint8_t>> token_valid;
};

// Where a local tensor sits in the global one along its one sharded axis: local position i of
// `axis` is global position begin + i, and positions i >= valid are padding. An empty axis means
// the local tensor is the whole global tensor.
// Where a rank's local (batch, seq, ...) tensor sits in the global one: its batch positions are
// global [batch_begin, batch_begin + batch_valid), likewise seq; local positions past a valid
// count are padding. A valid count of -1 means every local position (the axis is whole).
struct LocalFrame {
  std::int64_t batch_begin = 0;
  std::int64_t batch_valid = -1;
  std::int64_t seq_begin = 0;
  std::int64_t seq_valid = -1;
};

// This rank's share: the sum over its valid tokens, and how many valid tokens it holds.
// y, target: (batch, seq, feature) in any axis order.
template <typename T>
void masked_mse_partial(const Tensor<T>& y, const Tensor<T>& target, const MaskedMseParams& params,
                        const LocalFrame& frame, T& sum, std::int64_t& valid_tokens);

// How many of the tokens of a local tensor of shape `local` (in `frame`) are valid; the count
// masked_mse_partial returns, without the values.
std::int64_t masked_valid_tokens(const Shape& local, const MaskedMseParams& params,
                                 const LocalFrame& frame);

// dy = 2 * (y - target) / V on valid tokens, 0 elsewhere (activation grad: written, not added).
template <typename T>
void masked_mse_backward(const Tensor<T>& y, const Tensor<T>& target,
                         const MaskedMseParams& params, const LocalFrame& frame,
                         const T& global_valid_tokens, Tensor<T>& dy);

}  // namespace shardsim
