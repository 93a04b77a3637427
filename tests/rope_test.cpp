// Tests for ops/rope.hpp: the two pairing conventions on hand-derived known answers, position 0
// as the exact identity, the transpose (backward) as the inverse and the adjoint in mp, per-shard
// rotation equal to whole-tensor rotation bit for bit, and independence from the axis order.
#include "ops/attention/rope.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/mp.hpp"
#include "core/placement.hpp"
#include "core/rng.hpp"
#include "ops/attention/attention.hpp"
#include "tensor_test_support.hpp"

using shardsim::Mp;
using shardsim::RopeConvention;
using shardsim::RopeParams;
using shardsim::Shape;
using shardsim::Tensor;

using tensor_test::seeded_normal;
using tensor_test::to_double;
using tensor_test::unit_roundoff;

namespace {

// One token, one head: x = [1, 2, 3, 4] at position 1 with theta = 10000, D = 4.
//   inv_freq = [10000^0, 10000^(-2/4)] = [1, 0.01], so the planes turn by 1 and 0.01 radians.
//   rotate_half pairs (0, 2), (1, 3):
//     y0 = 1 cos 1 - 3 sin 1      y2 = 3 cos 1 + 1 sin 1
//     y1 = 2 cos .01 - 4 sin .01  y3 = 4 cos .01 + 2 sin .01
//   interleaved pairs (0, 1), (2, 3):
//     y0 = 1 cos 1 - 2 sin 1      y1 = 2 cos 1 + 1 sin 1
//     y2 = 3 cos .01 - 4 sin .01  y3 = 4 cos .01 + 3 sin .01
std::vector<double> known_answer(RopeConvention convention) {
  const double c1 = std::cos(1.0), s1 = std::sin(1.0);
  const double c2 = std::cos(0.01), s2 = std::sin(0.01);
  if (convention == RopeConvention::rotate_half) {
    return {1 * c1 - 3 * s1, 2 * c2 - 4 * s2, 3 * c1 + 1 * s1, 4 * c2 + 2 * s2};
  }
  return {1 * c1 - 2 * s1, 2 * c1 + 1 * s1, 3 * c2 - 4 * s2, 4 * c2 + 3 * s2};
}

}  // namespace

TEST_CASE("rope pairs name the convention", "[rope]") {
  // rotate_half (NeoX): plane i rotates (i, i + D/2); interleaved (GPT-J): (2i, 2i + 1).
  CHECK(shardsim::rope_pair(RopeConvention::rotate_half, 8, 1).a == 1);
  CHECK(shardsim::rope_pair(RopeConvention::rotate_half, 8, 1).b == 5);
  CHECK(shardsim::rope_pair(RopeConvention::interleaved, 8, 1).a == 2);
  CHECK(shardsim::rope_pair(RopeConvention::interleaved, 8, 1).b == 3);
  CHECK(shardsim::parse_rope_convention("interleaved") == RopeConvention::interleaved);
  CHECK_THROWS_AS(shardsim::parse_rope_convention("neox"), shardsim::InputError);
}

TEMPLATE_TEST_CASE("rope_forward known answers for both conventions", "[rope]", float, double) {
  for (RopeConvention convention : {RopeConvention::rotate_half, RopeConvention::interleaved}) {
    INFO("convention " << shardsim::rope_convention_name(convention));
    const Shape shape = shardsim::head_shape(1, "seq", 1, 1, 4);
    const Tensor<TestType> x(shape, {1, 2, 3, 4});
    RopeParams params;
    params.convention = convention;
    Tensor<TestType> y;
    shardsim::rope_forward(x, {1}, params, y);
    const std::vector<double> expected = known_answer(convention);
    // Error budget per output: pow, the angle product, cos and sin each add at most ~1 unit
    // roundoff u to c and s, the two products and the sum add 2 more, all scaled by
    // |x_a| + |x_b| <= 7: below 6u * 7. 8u * 7 leaves margin; a wrong pairing or sign is off by
    // O(1).
    const double bound = 8 * unit_roundoff<TestType>() * 7;
    for (int i = 0; i < 4; ++i) {
      INFO("i = " << i);
      CHECK(std::fabs(static_cast<double>(y[i]) - expected[static_cast<std::size_t>(i)]) <= bound);
    }
  }
}

TEMPLATE_TEST_CASE("rope at position 0 is the identity bit for bit", "[rope]", float, double, Mp) {
  shardsim::set_mp_precision(256);
  const Tensor<TestType> x = seeded_normal<TestType>(shardsim::head_shape(2, "seq", 1, 3, 6), 11);
  for (RopeConvention convention : {RopeConvention::rotate_half, RopeConvention::interleaved}) {
    RopeParams params;
    params.convention = convention;
    Tensor<TestType> y;
    shardsim::rope_forward(x, {0}, params, y);
    // cos 0 = 1 and sin 0 = 0 exactly, so x_a * 1 - x_b * 0 = x_a.
    for (std::int64_t i = 0; i < x.numel(); ++i) CHECK(y[i] == x[i]);
  }
}

TEST_CASE("rope backward inverts forward and is its adjoint, in mp256", "[rope][mp]") {
  shardsim::set_mp_precision(256);
  const Shape shape = shardsim::head_shape(2, "seq", 5, 2, 8);
  const Tensor<Mp> x = seeded_normal<Mp>(shape, 21);
  const Tensor<Mp> g = seeded_normal<Mp>(shape, 22);
  const std::vector<std::int64_t> positions{3, 4, 5, 6, 1000};
  for (RopeConvention convention : {RopeConvention::rotate_half, RopeConvention::interleaved}) {
    RopeParams params;
    params.convention = convention;
    params.theta = 500;
    Tensor<Mp> y, back, gt;
    shardsim::rope_forward(x, positions, params, y);
    shardsim::rope_backward(y, positions, params, back);
    shardsim::rope_backward(g, positions, params, gt);
    // A rotation's transpose is its inverse, and <R x, g> = <x, R^T g>. Each value carries a few
    // roundings at 257 bits with |values| ~ 4: 2^-240 relative is 2^16 units of slack.
    const double tol = std::ldexp(1.0, -240);
    Mp dot_y = 0, dot_x = 0, norm_x = 0, norm_y = 0;
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      CHECK(std::fabs(to_double(Mp(back[i] - x[i]))) <= tol * 8);
      dot_y += y[i] * g[i];
      dot_x += x[i] * gt[i];
      norm_x += x[i] * x[i];
      norm_y += y[i] * y[i];
    }
    CHECK(std::fabs(to_double(Mp(dot_y - dot_x))) <= tol * to_double(norm_x));
    CHECK(std::fabs(to_double(Mp(norm_y - norm_x))) <= tol * to_double(norm_x));
  }
}

TEMPLATE_TEST_CASE("per-shard rope at absolute positions equals whole-tensor rope bitwise",
                   "[rope]", float, double) {
  // The allgather plan's premise: RoPE is elementwise per token, so rotating each shard with its
  // own absolute positions and concatenating is the whole rotation, bit for bit.
  const std::int64_t n = 13;
  const Tensor<TestType> k = seeded_normal<TestType>(shardsim::head_shape(2, "kv", n, 3, 4), 31);
  RopeParams params;
  params.pos_axis = "kv";
  const std::vector<std::int64_t> positions = shardsim::position_range(100, n);
  Tensor<TestType> whole;
  shardsim::rope_forward(k, positions, params, whole);
  for (int ranks = 1; ranks <= 5; ++ranks) {
    Tensor<TestType> joined(k.shape());
    for (const shardsim::Slice& s :
         shardsim::shard_slices(n, ranks, shardsim::SplitPolicy::chunk)) {
      Tensor<TestType> part = shardsim::slice_along(k, "kv", s.begin, s.valid());
      Tensor<TestType> turned;
      shardsim::rope_forward(part, shardsim::position_range(100 + s.begin, s.valid()), params,
                             turned);
      shardsim::copy_along(turned, "kv", 0, joined, s.begin, s.valid());
    }
    INFO("ranks = " << ranks);
    CHECK(joined.values() == whole.values());
  }
}

TEMPLATE_TEST_CASE("rope follows named axes, not positions", "[rope]", float, double) {
  // The same data laid out (batch, seq, head_dim, head) rotates to the same values as in the
  // (batch, seq, head, head_dim) layout: the kernel finds head_dim by name.
  const Shape standard = shardsim::head_shape(2, "seq", 3, 3, 4);
  const Tensor<TestType> x = seeded_normal<TestType>(standard, 41);
  const Shape swapped({{"batch", 2}, {"seq", 3}, {"head_dim", 4}, {"head", 3}});
  Tensor<TestType> xs(swapped);
  auto at_standard = [](std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d) {
    return ((b * 3 + s) * 3 + h) * 4 + d;
  };
  auto at_swapped = [](std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d) {
    return ((b * 3 + s) * 4 + d) * 3 + h;
  };
  auto for_all = [](auto visit) {
    for (std::int64_t b = 0; b < 2; ++b) {
      for (std::int64_t s = 0; s < 3; ++s) {
        for (std::int64_t h = 0; h < 3; ++h) {
          for (std::int64_t d = 0; d < 4; ++d) visit(b, s, h, d);
        }
      }
    }
  };
  for_all([&](auto b, auto s, auto h, auto d) {
    xs[at_swapped(b, s, h, d)] = x[at_standard(b, s, h, d)];
  });
  RopeParams params;
  params.convention = RopeConvention::interleaved;
  Tensor<TestType> y, ys;
  shardsim::rope_forward(x, {7, 8, 9}, params, y);
  shardsim::rope_forward(xs, {7, 8, 9}, params, ys);
  for_all([&](auto b, auto s, auto h, auto d) {
    CHECK(ys[at_swapped(b, s, h, d)] == y[at_standard(b, s, h, d)]);
  });
}
