// Rotary position embedding (Su et al., "RoFormer: Enhanced Transformer with Rotary Position
// Embedding", 2021), per-rank kernel and dense oracle.
//
// x has the named axes (batch, POS, head, head_dim), POS being `pos_axis` ("seq" for queries and
// chunk keys, "kv" for the KV axis). Every (batch, pos, head) vector of D = head_dim values is
// rotated in D/2 planes; plane i turns by the angle
//   angle(p, i) = p * inv_freq_i,     inv_freq_i = rope_theta^(-2i / D),   i = 0 .. D/2 - 1,
// where p is the ABSOLUTE position of the token (positions[pos], given by the caller). Computed in
// the run's own type T: inv_freq_i = pow(T(theta), T(-2i) / T(D)); a = T(p) * inv_freq_i;
// c = cos(a); s = sin(a). The rotated pair (x_a, x_b) is
//   y_a = x_a * c - x_b * s
//   y_b = x_b * c + x_a * s
// and the pairs are named by the convention:
//   rotate_half  (GPT-NeoX, HF Llama)  plane i rotates (i, i + D/2)
//   interleaved  (GPT-J, Meta Llama)   plane i rotates (2i, 2i + 1)
// The map is elementwise per token: a shard can rotate its own tokens with their own absolute
// positions and the result is bitwise what rotating the whole tensor gives (the plans claim it).
// Position 0 is the identity bit for bit (c = 1, s = 0).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.hpp"

namespace shardsim {

enum class RopeConvention { rotate_half, interleaved };

std::string_view rope_convention_name(RopeConvention convention);
// "rotate_half" or "interleaved". Throws InputError otherwise.
RopeConvention parse_rope_convention(std::string_view text);

struct RopeParams {
  double theta = 10000.0;  // rope_theta; f32 runs use float(theta)
  RopeConvention convention = RopeConvention::rotate_half;
  std::string pos_axis = "seq";
  std::string dim_axis = "head_dim";
};

// The two indices (along head_dim) that plane `plane` rotates: (a, b) with y_a = x_a c - x_b s.
struct RopePair {
  std::int64_t a = 0;
  std::int64_t b = 0;
};
RopePair rope_pair(RopeConvention convention, std::int64_t head_dim, std::int64_t plane);

// x: (batch, POS, head, head_dim) -> y: same shape. positions: one absolute position per index of
// pos_axis. REQUIRES: positions.size() == extent(pos_axis), head_dim even, and dim_axis after
// pos_axis in x's axis order.
template <typename T>
void rope_forward(const Tensor<T>& x, const std::vector<std::int64_t>& positions,
                  const RopeParams& params, Tensor<T>& y);

// The transpose (= inverse) rotation: dx_a = dy_a c + dy_b s, dx_b = dy_b c - dy_a s.
// Activation grad: dx is written, not accumulated.
template <typename T>
void rope_backward(const Tensor<T>& dy, const std::vector<std::int64_t>& positions,
                   const RopeParams& params, Tensor<T>& dx);

// Consecutive positions first, first + 1, ..., first + count - 1.
std::vector<std::int64_t> position_range(std::int64_t first, std::int64_t count);

}  // namespace shardsim
