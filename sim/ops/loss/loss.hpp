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
#include <optional>
#include <string>
#include <vector>

#include "core/placement.hpp"
#include "core/tensor.hpp"

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

// Where a rank's local (batch, seq, ...) tensor sits in the global one: its share of batch and of
// seq (placement.hpp: local position i is global to_global(share, i), padding when i >= valid;
// a zigzag share has two runs). No share means the axis is whole (local = global).
// With micro-batches the tensor holds one micro-batch, whose first row is global batch row
// `batch_begin` of the step: a token's global batch index is batch_begin + its index within the
// micro-batch.
struct LocalFrame {
  std::optional<Slice> batch;
  std::optional<Slice> seq;
  std::int64_t batch_begin = 0;
};

// This rank's share: the sum over its valid tokens, and how many valid tokens it holds.
// y, target: (batch, seq, feature) in any axis order. Tokens are added in flat order, one token's
// squared differences summed first. `carry`: start from the given sum and count instead of 0
// (the oracle in row blocks continues the previous block's sum, oracle_rows.hpp).
template <typename T>
void masked_mse_partial(const Tensor<T>& y, const Tensor<T>& target, const MaskedMseParams& params,
                        const LocalFrame& frame, T& sum, std::int64_t& valid_tokens,
                        bool carry = false);

// How many of the tokens of a local tensor of shape `local` (in `frame`) are valid; the count
// masked_mse_partial returns, without the values.
std::int64_t masked_valid_tokens(const Shape& local, const MaskedMseParams& params,
                                 const LocalFrame& frame);

// dy = 2 * (y - target) / V on valid tokens, 0 elsewhere (activation grad: written, not added).
template <typename T>
void masked_mse_backward(const Tensor<T>& y, const Tensor<T>& target, const MaskedMseParams& params,
                         const LocalFrame& frame, const T& global_valid_tokens, Tensor<T>& dy);

}  // namespace shardsim
