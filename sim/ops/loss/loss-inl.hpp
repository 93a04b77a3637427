// Template bodies of ops/loss.hpp.
#pragma once

#include "core/shape.hpp"
#include "ops/loss/loss.hpp"

namespace shardsim {

namespace detail {

// Visits every token of a local (batch, seq, feature) tensor in row-major order of the
// non-feature axes: visit(flat index of feature 0, feature stride, valid?).
template <typename Visit>
void for_each_token(const Shape& shape, const MaskedMseParams& params, const LocalFrame& frame,
                    Visit visit) {
  const AxisView features = AxisView::of(shape, params.feature_axis);
  const std::size_t batch_pos = shape.position(params.batch_axis);
  const std::size_t seq_pos = shape.position(params.seq_axis);
  for (std::int64_t o = 0; o < features.outer; ++o) {
    for (std::int64_t j = 0; j < features.inner; ++j) {
      // Recover the local batch/seq coordinates of this token from its flat position.
      const std::vector<std::int64_t> local = unflatten(shape, features.flat(o, 0, j));
      std::int64_t b = local[batch_pos];
      std::int64_t s = local[seq_pos];
      bool valid =
          !(frame.batch && is_pad(*frame.batch, b)) && !(frame.seq && is_pad(*frame.seq, s));
      if (frame.batch) b = to_global(*frame.batch, b);
      b += frame.batch_begin;
      if (frame.seq) s = to_global(*frame.seq, s);
      if (valid && !params.token_valid.empty()) {
        valid = params.token_valid[static_cast<std::size_t>(b)][static_cast<std::size_t>(s)] != 0;
      } else if (valid && !params.valid_lengths.empty()) {
        valid = s < params.valid_lengths[static_cast<std::size_t>(b)];
      }
      visit(features.flat(o, 0, j), features.inner, features.extent, valid);
    }
  }
}

}  // namespace detail

template <typename T>
void masked_mse_partial(const Tensor<T>& y, const Tensor<T>& target, const MaskedMseParams& params,
                        const LocalFrame& frame, T& sum, std::int64_t& valid_tokens, bool carry) {
  if (!carry) {
    sum = T(0);
    valid_tokens = 0;
  }
  detail::for_each_token(
      y.shape(), params, frame,
      [&](std::int64_t first, std::int64_t stride, std::int64_t features, bool valid) {
        if (!valid) return;
        T token_sum = T(0);
        for (std::int64_t h = 0; h < features; ++h) {
          const T diff = y[first + h * stride] - target[first + h * stride];
          token_sum += diff * diff;
        }
        sum += token_sum;
        ++valid_tokens;
      });
}

template <typename T>
void masked_mse_backward(const Tensor<T>& y, const Tensor<T>& target, const MaskedMseParams& params,
                         const LocalFrame& frame, const T& global_valid_tokens, Tensor<T>& dy) {
  dy = Tensor<T>(y.shape());
  detail::for_each_token(
      y.shape(), params, frame,
      [&](std::int64_t first, std::int64_t stride, std::int64_t features, bool valid) {
        if (!valid) return;
        for (std::int64_t h = 0; h < features; ++h) {
          const std::int64_t at = first + h * stride;
          dy[at] = (T(2) * (y[at] - target[at])) / global_valid_tokens;
        }
      });
}

}  // namespace shardsim

#define SHARDSIM_INSTANTIATE_LOSS(T)                                                            \
  template void masked_mse_partial(const Tensor<T>&, const Tensor<T>&, const MaskedMseParams&,  \
                                   const LocalFrame&, T&, std::int64_t&, bool);                 \
  template void masked_mse_backward(const Tensor<T>&, const Tensor<T>&, const MaskedMseParams&, \
                                    const LocalFrame&, const T&, Tensor<T>&);
