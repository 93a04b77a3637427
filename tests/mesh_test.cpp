// The device mesh (coordinates, groups) and layouts on it (DTensor's nested sharding rules).
// Every expected value is derived by hand in the comment above it.
#include <catch2/catch.hpp>

#include "core/placement.hpp"

using namespace shardsim;

namespace {

Mesh dp_cp_tp() { return Mesh({{"dp", 2}, {"cp", 2}, {"tp", 2}}); }

}  // namespace

TEST_CASE("mesh: row-major coordinates, outermost dim first", "[mesh]") {
  const Mesh mesh = dp_cp_tp();
  CHECK(mesh.size() == 8);
  CHECK(mesh.ndim() == 3);
  // 5 = 0b101: dp 1, cp 0, tp 1.
  CHECK(mesh.coords(5) == std::vector<int>{1, 0, 1});
  CHECK(mesh.rank_of({1, 0, 1}) == 5);
  CHECK(mesh.coords_str(5) == "dp=1, cp=0, tp=1");
  CHECK(mesh.str() == "dp=2, cp=2, tp=2");
  CHECK(mesh.find_dim("cp") == 1);
  CHECK(mesh.find_dim("pp") == -1);
  // 3 x 2: rank 4 = 2 * 2 + 0.
  const Mesh uneven({{"dp", 3}, {"tp", 2}});
  CHECK(uneven.coords(4) == std::vector<int>{2, 0});
  CHECK(uneven.rank_of({1, 1}) == 3);
  for (int r = 0; r < uneven.size(); ++r) CHECK(uneven.rank_of(uneven.coords(r)) == r);
}

TEST_CASE("mesh: the groups of a dim share every other coordinate", "[mesh]") {
  const Mesh mesh = dp_cp_tp();
  // tp is innermost: consecutive pairs. dp is outermost: ranks 4 apart. cp: 2 apart.
  CHECK(mesh.groups(2) == std::vector<std::vector<int>>{{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  CHECK(mesh.groups(0) == std::vector<std::vector<int>>{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  CHECK(mesh.groups(1) == std::vector<std::vector<int>>{{0, 2}, {1, 3}, {4, 6}, {5, 7}});
  CHECK(mesh.group_of(6, 1) == std::vector<int>{4, 6});
  // The 1-D form: one group of everyone.
  const Mesh line(4);
  CHECK(line.dim(0).name == "world");
  CHECK(line.groups(0) == std::vector<std::vector<int>>{{0, 1, 2, 3}});
}

TEST_CASE("layout: a 1-D layout prints as its placement, N-D as a list", "[mesh]") {
  CHECK(Layout({Placement::shard("seq")}).str() == "Shard(seq)");
  CHECK(Layout({Placement::replicate(), Placement::shard("seq", SplitPolicy::balanced),
                Placement::partial()})
            .str() == "[Replicate, Shard(seq, balanced), Partial(sum)]");
  const Layout l = Layout::uniform(3, Placement::replicate());
  CHECK(l.is_replicate());
  CHECK(l.with(1, Placement::partial()).has_partial());
  CHECK(l.with(2, Placement::shard("hidden")).shards("hidden"));
  CHECK_FALSE(l.shards("hidden"));
}

TEST_CASE("layout: two dims sharding one axis nest, as DTensor does", "[mesh]") {
  // seq = 13 on dp = 2 then cp = 2, both chunk: dp cuts 13 into 7 + 6 ([0,7), [7,13)); cp cuts
  // 7 into 4 + 3 and 6 into 3 + 3. So (dp, cp) = (0,0) [0,4), (0,1) [4,7), (1,0) [7,10),
  // (1,1) [10,13): not torch.chunk(13, 4) = 4,4,4,1.
  const Mesh mesh({{"dp", 2}, {"cp", 2}});
  const Shape global({{"batch", 2}, {"seq", 13}});
  const Layout layout({Placement::shard("seq"), Placement::shard("seq")});
  const std::vector<Slice> want = {{0, 4, 4}, {4, 7, 3}, {7, 10, 3}, {10, 13, 3}};
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r);
    CHECK(axis_slice(global, layout, mesh, r, "seq") == want[r]);
    CHECK(local_shape(global, layout, mesh, r) ==
          Shape({{"batch", 2}, {"seq", want[r].local_extent}}));
    CHECK(axis_slice(global, layout, mesh, r, "batch") == Slice{0, 2, 2});
  }
}

TEST_CASE("layout: nested padded shards keep a valid prefix and trailing pads", "[mesh]") {
  // seq = 5, padded on dp = 2: chunk 3, dp0 [0,3) local 3, dp1 [3,5) local 3 (one pad). Then
  // padded on cp = 2 over a local extent of 3: chunk 2, pieces [0,2) and [2,3) (+1 pad).
  //   (0,0): [0,2) local 2     (0,1): [2,3) local 2 (1 pad)
  //   (1,0): [3,5) local 2     (1,1): dp1 has 2 valid of 3, piece [2,3) is past them: [5,5),
  //                                   local 2 (2 pads)
  const Mesh mesh({{"dp", 2}, {"cp", 2}});
  const Shape global({{"seq", 5}});
  const Placement padded = Placement::shard("seq", SplitPolicy::padded);
  const Layout layout({padded, padded});
  const std::vector<Slice> want = {{0, 2, 2}, {2, 3, 2}, {3, 5, 2}, {5, 5, 2}};
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r);
    CHECK(axis_slice(global, layout, mesh, r, "seq") == want[r]);
  }
}

TEST_CASE("layout: different axes on different dims are independent", "[mesh]") {
  // [batch=3, hidden=5] with Shard(batch) on dp = 2 (2, 1) and Shard(hidden) on tp = 2 (3, 2).
  const Mesh mesh({{"dp", 2}, {"tp", 2}});
  const Shape global({{"batch", 3}, {"hidden", 5}});
  const Layout layout({Placement::shard("batch"), Placement::shard("hidden")});
  CHECK(local_shape(global, layout, mesh, 0) == Shape({{"batch", 2}, {"hidden", 3}}));
  CHECK(local_shape(global, layout, mesh, 1) == Shape({{"batch", 2}, {"hidden", 2}}));
  CHECK(local_shape(global, layout, mesh, 2) == Shape({{"batch", 1}, {"hidden", 3}}));
  CHECK(local_shape(global, layout, mesh, 3) == Shape({{"batch", 1}, {"hidden", 2}}));
  CHECK(axis_slice(global, layout, mesh, 3, "hidden") == Slice{3, 5, 2});
  // A 1-D layout reproduces the 1-D functions.
  const Mesh line(4);
  const Shape seq({{"seq", 13}});
  for (int r = 0; r < 4; ++r) {
    CHECK(axis_slice(seq, Layout({Placement::shard("seq")}), line, r, "seq") ==
          rank_slice(seq, Placement::shard("seq"), 4, r));
  }
}
