// Tests for ops/norm_rows.hpp: for_each_row visits every row of a tensor viewed along its
// normalized axis exactly once, in ascending order, in blocks of kNormRowBlock rows and then
// single rows, and a block's indices are the AxisView's.
#include "ops/norm_rows.hpp"

#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

#include "core/shape.hpp"

using shardsim::AxisView;
using shardsim::Shape;

TEST_CASE("for_each_row visits every row once, in order, in blocks of four then singles",
          "[norm_rows]") {
  // hidden is the middle axis: rows are the (seq, batch) positions, element i of row
  // r = o * 3 + j at flat index (o * 5 + i) * 3 + j. seq = 0, 1, 3, 7 gives 0, 3, 9 and 21 rows:
  // no block, none and a tail of 3, two blocks and a tail of 1, five blocks and a tail of 1.
  for (std::int64_t seq : {0, 1, 3, 7}) {
    INFO("seq = " << seq);
    const Shape shape({{"seq", seq}, {"hidden", 5}, {"batch", 3}});
    const AxisView view = AxisView::of(shape, "hidden");
    std::vector<std::int64_t> visited;  // rows in visiting order
    std::vector<int> block_sizes;
    shardsim::detail::for_each_row(view, [&](const auto& block) {
      constexpr int n = shardsim::detail::rows_in<decltype(block)>;
      block_sizes.push_back(n);
      for (int q = 0; q < n; ++q) {
        const std::int64_t row = block.row(q);
        visited.push_back(row);
        for (std::int64_t i = 0; i < 5; ++i)
          CHECK(block.at(q, i) == view.flat(row / 3, i, row % 3));
      }
    });
    const std::int64_t rows = seq * 3;
    REQUIRE(static_cast<std::int64_t>(visited.size()) == rows);
    for (std::int64_t r = 0; r < rows; ++r) CHECK(visited[static_cast<std::size_t>(r)] == r);
    const std::int64_t full_blocks = rows / shardsim::detail::kNormRowBlock;
    for (std::size_t b = 0; b < block_sizes.size(); ++b) {
      const int expected = static_cast<std::int64_t>(b) < full_blocks ? 4 : 1;
      CHECK(block_sizes[b] == expected);
    }
    CHECK(static_cast<std::int64_t>(block_sizes.size()) == full_blocks + rows % 4);
  }
}
