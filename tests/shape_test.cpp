// Tests for shape.hpp: named shapes, the AxisView index helper, unflatten, checked_numel.
#include <catch2/catch.hpp>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/shape.hpp"

using shardsim::Axis;
using shardsim::AxisView;
using shardsim::Shape;

namespace {

Shape bsh(std::int64_t batch, std::int64_t seq, std::int64_t hidden) {
  return Shape({{"batch", batch}, {"seq", seq}, {"hidden", hidden}});
}

}  // namespace

TEST_CASE("Shape names its axes outermost first", "[shape]") {
  const Shape shape = bsh(2, 13, 16);
  CHECK(shape.str() == "[batch=2, seq=13, hidden=16]");
  CHECK(Shape().str() == "[]");
  CHECK(shape.rank() == 3);
  CHECK(shape.numel() == 2 * 13 * 16);
  CHECK(Shape().numel() == 1);  // a scalar has one element
  CHECK(shape.position("batch") == 0);
  CHECK(shape.position("seq") == 1);
  CHECK(shape.position("hidden") == 2);
  CHECK(shape.extent("seq") == 13);
  CHECK(shape.has("hidden"));
  CHECK_FALSE(shape.has("sequence"));
  CHECK_FALSE(shape.find("head").has_value());
  CHECK(shape.with_extent("seq", 4) == bsh(2, 4, 16));
  CHECK(shape.with_extent("seq", 4).str() == "[batch=2, seq=4, hidden=16]");
  CHECK(shape.without("seq").str() == "[batch=2, hidden=16]");
  CHECK(shape.without("hidden").str() == "[batch=2, seq=13]");
  // Axis names matter for equality, not just extents.
  CHECK_FALSE(Shape({{"batch", 2}, {"seq", 13}}) == Shape({{"seq", 2}, {"batch", 13}}));
}

TEST_CASE("AxisView sees a row-major tensor as (outer, extent, inner) around a named axis",
          "[shape]") {
  const Shape shape = bsh(2, 13, 16);
  // batch is outermost: nothing outside, seq*hidden inside.
  const AxisView b = AxisView::of(shape, "batch");
  CHECK((b.outer == 1 && b.extent == 2 && b.inner == 13 * 16));
  const AxisView s = AxisView::of(shape, "seq");
  CHECK((s.outer == 2 && s.extent == 13 && s.inner == 16));
  const AxisView h = AxisView::of(shape, "hidden");
  CHECK((h.outer == 2 * 13 && h.extent == 16 && h.inner == 1));

  // Element (batch=1, seq=12, hidden=5) is at row-major flat 1*13*16 + 12*16 + 5 = 405, whichever
  // axis the view is built around.
  const std::int64_t flat = 1 * 13 * 16 + 12 * 16 + 5;
  CHECK(b.flat(0, 1, 12 * 16 + 5) == flat);
  CHECK(s.flat(1, 12, 5) == flat);
  CHECK(h.flat(1 * 13 + 12, 5, 0) == flat);

  // Every flat index is hit exactly once when walking a view in (o, i, j) order, and in order.
  std::int64_t expected = 0;
  for (std::int64_t o = 0; o < s.outer; ++o) {
    for (std::int64_t i = 0; i < s.extent; ++i) {
      for (std::int64_t j = 0; j < s.inner; ++j) REQUIRE(s.flat(o, i, j) == expected++);
    }
  }
  CHECK(expected == shape.numel());
}

TEST_CASE("unflatten inverts row-major flattening", "[shape]") {
  const Shape shape = bsh(2, 13, 16);
  CHECK(shardsim::unflatten(shape, 0) == std::vector<std::int64_t>{0, 0, 0});
  CHECK(shardsim::unflatten(shape, 405) == std::vector<std::int64_t>{1, 12, 5});
  CHECK(shardsim::unflatten(shape, shape.numel() - 1) == std::vector<std::int64_t>{1, 12, 15});
  // Round trip over an odd shape: flat -> index -> flat.
  const Shape odd = bsh(3, 5, 7);
  for (std::int64_t flat = 0; flat < odd.numel(); ++flat) {
    const std::vector<std::int64_t> index = shardsim::unflatten(odd, flat);
    REQUIRE(index.size() == 3);
    CHECK((index[0] * 5 + index[1]) * 7 + index[2] == flat);
    CHECK((index[0] < 3 && index[1] < 5 && index[2] < 7));
  }
}

TEST_CASE("checked_numel detects int64 overflow before anything allocates", "[shape]") {
  using shardsim::checked_numel;
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  CHECK(checked_numel({}) == 1);
  CHECK(checked_numel({2, 13, 16}) == 416);
  CHECK(checked_numel({kMax}) == kMax);
  CHECK(checked_numel({kMax, 1}) == kMax);
  CHECK_FALSE(checked_numel({kMax, 2}).has_value());
  // 2^32 * 2^32 = 2^64 overflows although each factor is small.
  CHECK_FALSE(checked_numel({std::int64_t{1} << 32, std::int64_t{1} << 32}).has_value());
  // 2^31 * 2^31 = 2^62 fits.
  CHECK(checked_numel({std::int64_t{1} << 31, std::int64_t{1} << 31}) == std::int64_t{1} << 62);
  CHECK_FALSE(checked_numel({3, -1}).has_value());
}
