// Tests for placement.hpp: split policies, local<->global identity, parsing.
#include "core/placement.hpp"

#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

#include "core/dist_tensor.hpp"
#include "core/error.hpp"

using shardsim::Placement;
using shardsim::shard_slices;
using shardsim::Slice;
using shardsim::SplitPolicy;

namespace {

std::vector<std::int64_t> valid_sizes(const std::vector<Slice>& slices) {
  std::vector<std::int64_t> out;
  for (const Slice& s : slices) out.push_back(s.valid());
  return out;
}

std::vector<std::int64_t> local_extents(const std::vector<Slice>& slices) {
  std::vector<std::int64_t> out;
  for (const Slice& s : slices) out.push_back(s.local_extent);
  return out;
}

using Sizes = std::vector<std::int64_t>;

}  // namespace

TEST_CASE("chunk split is torch.chunk: c = ceil(n/k), trailing ranks may be empty", "[placement]") {
  // 13/4: c = 4 -> [0,4) [4,8) [8,12) [12,13).
  const auto s13 = shard_slices(13, 4, SplitPolicy::chunk);
  CHECK(valid_sizes(s13) == Sizes{4, 4, 4, 1});
  CHECK(local_extents(s13) == Sizes{4, 4, 4, 1});
  CHECK(s13[3] == Slice{12, 13, 1});
  // 5/4: c = 2 -> [0,2) [2,4) [4,5) [5,5).
  CHECK(valid_sizes(shard_slices(5, 4, SplitPolicy::chunk)) == Sizes{2, 2, 1, 0});
  // 3/4: c = 1 -> [0,1) [1,2) [2,3) [3,3).
  CHECK(valid_sizes(shard_slices(3, 4, SplitPolicy::chunk)) == Sizes{1, 1, 1, 0});
  // 0/3: everyone empty.
  CHECK(valid_sizes(shard_slices(0, 3, SplitPolicy::chunk)) == Sizes{0, 0, 0});
}

TEST_CASE("balanced split is torch.tensor_split: the first n%k ranks get one more", "[placement]") {
  // 13 = 4*3 + 1: one rank gets 4, the rest 3.
  const auto s13 = shard_slices(13, 4, SplitPolicy::balanced);
  CHECK(valid_sizes(s13) == Sizes{4, 3, 3, 3});
  CHECK(s13[1] == Slice{4, 7, 3});
  CHECK(s13[3] == Slice{10, 13, 3});
  CHECK(valid_sizes(shard_slices(5, 4, SplitPolicy::balanced)) == Sizes{2, 1, 1, 1});
  CHECK(valid_sizes(shard_slices(3, 4, SplitPolicy::balanced)) == Sizes{1, 1, 1, 0});
}

TEST_CASE("padded split: every rank holds c positions, those past n are padding", "[placement]") {
  // 13/4: c = 4, padded length 16; rank 3 holds global 12 plus 3 pad positions.
  const auto s13 = shard_slices(13, 4, SplitPolicy::padded);
  CHECK(local_extents(s13) == Sizes{4, 4, 4, 4});
  CHECK(valid_sizes(s13) == Sizes{4, 4, 4, 1});
  CHECK(s13[3].pad() == 3);
  CHECK_FALSE(shardsim::is_pad(s13[3], 0));
  CHECK(shardsim::to_global(s13[3], 0) == 12);
  for (std::int64_t local = 1; local <= 3; ++local) CHECK(shardsim::is_pad(s13[3], local));
  for (int r = 0; r < 3; ++r) {
    CHECK(s13[r].pad() == 0);
    for (std::int64_t local = 0; local < 4; ++local) CHECK_FALSE(shardsim::is_pad(s13[r], local));
  }
  // 3/4: c = 1; rank 3 holds one pad position and no real one.
  const auto s3 = shard_slices(3, 4, SplitPolicy::padded);
  CHECK(local_extents(s3) == Sizes{1, 1, 1, 1});
  CHECK(valid_sizes(s3) == Sizes{1, 1, 1, 0});
  CHECK(shardsim::is_pad(s3[3], 0));
  CHECK(shardsim::slice_str("seq", s13[3]) == "seq[12:13)+3pad");
  CHECK(shardsim::slice_str("seq", s13[0]) == "seq[0:4)");
}

TEST_CASE("every split gives a contiguous, ordered, exact cover with a local<->global identity",
          "[placement]") {
  for (SplitPolicy split : {SplitPolicy::chunk, SplitPolicy::balanced, SplitPolicy::padded}) {
    for (int ranks = 1; ranks <= 5; ++ranks) {
      for (std::int64_t n = 1; n <= 17; ++n) {
        INFO("split " << shardsim::split_name(split) << ", n = " << n << ", ranks = " << ranks);
        const std::vector<Slice> slices = shard_slices(n, ranks, split);
        REQUIRE(slices.size() == static_cast<std::size_t>(ranks));
        // Contiguous and in rank order, covering [0, n).
        std::int64_t next = 0;
        for (const Slice& s : slices) {
          CHECK(s.begin == next);
          CHECK(s.end >= s.begin);
          CHECK(s.local_extent >= s.valid());
          next = s.end;
        }
        CHECK(next == n);
        // Each global position has exactly one owner, and owner_of names it.
        for (std::int64_t g = 0; g < n; ++g) {
          int owners = 0;
          for (int r = 0; r < ranks; ++r) owners += (g >= slices[r].begin && g < slices[r].end);
          CHECK(owners == 1);
          const Slice& own = slices[shardsim::owner_of(slices, g)];
          CHECK((g >= own.begin && g < own.end));
        }
        // Every non-pad local position maps into its rank's [begin, end), and back.
        for (int r = 0; r < ranks; ++r) {
          for (std::int64_t local = 0; local < slices[r].local_extent; ++local) {
            if (shardsim::is_pad(slices[r], local)) {
              CHECK(split == SplitPolicy::padded);
              continue;
            }
            const std::int64_t g = shardsim::to_global(slices[r], local);
            CHECK((g >= slices[r].begin && g < slices[r].end));
            CHECK(shardsim::owner_of(slices, g) == r);
            CHECK(g - slices[r].begin == local);
          }
        }
        // Local extents by policy: chunk and balanced hold no padding; padded holds c each.
        const std::int64_t c = (n + ranks - 1) / ranks;
        for (const Slice& s : slices) {
          if (split == SplitPolicy::padded) {
            CHECK(s.local_extent == c);
          } else {
            CHECK(s.pad() == 0);
          }
          if (split == SplitPolicy::balanced) {
            CHECK((s.valid() == n / ranks || s.valid() == n / ranks + 1));
          } else {
            CHECK(s.valid() <= c);
          }
        }
      }
    }
  }
}

TEST_CASE("local_shape and rank_slice follow the placement", "[placement]") {
  const shardsim::Shape global({{"batch", 2}, {"seq", 13}, {"hidden", 16}});
  const Placement seq = Placement::shard("seq");
  CHECK(shardsim::local_shape(global, seq, 4, 3).str() == "[batch=2, seq=1, hidden=16]");
  CHECK(shardsim::rank_slice(global, seq, 4, 3) == Slice{12, 13, 1});
  const Placement padded = Placement::shard("seq", SplitPolicy::padded);
  CHECK(shardsim::local_shape(global, padded, 4, 3).str() == "[batch=2, seq=4, hidden=16]");
  const Placement hidden = Placement::shard("hidden", SplitPolicy::balanced);
  CHECK(shardsim::local_shape(global, hidden, 3, 0).str() == "[batch=2, seq=13, hidden=6]");
  CHECK(shardsim::local_shape(global, hidden, 3, 2).str() == "[batch=2, seq=13, hidden=5]");
  CHECK(shardsim::local_shape(global, Placement::replicate(), 4, 2) == global);
  CHECK(shardsim::local_shape(global, Placement::partial(), 4, 2) == global);
}

TEST_CASE("parse_placement round-trips str() and rejects malformed text", "[placement]") {
  using shardsim::parse_placement;
  const std::vector<Placement> forms = {
      Placement::replicate(),
      Placement::partial(),
      Placement::shard("seq"),
      Placement::shard("seq", SplitPolicy::balanced),
      Placement::shard("seq", SplitPolicy::padded),
      Placement::shard("head_dim", SplitPolicy::chunk),
  };
  for (const Placement& p : forms) {
    INFO(p.str());
    CHECK(parse_placement(p.str()) == p);
  }
  CHECK(Placement::shard("seq").str() == "Shard(seq)");
  CHECK(Placement::shard("seq", SplitPolicy::balanced).str() == "Shard(seq, balanced)");
  CHECK(Placement::shard("seq", SplitPolicy::padded).str() == "Shard(seq, padded)");
  CHECK(Placement::partial().str() == "Partial(sum)");
  // An explicit chunk policy is the default one.
  CHECK(parse_placement("Shard(seq, chunk)") == Placement::shard("seq"));
  CHECK(parse_placement(" Shard( seq ,balanced ) ") ==
        Placement::shard("seq", SplitPolicy::balanced));
  for (const char* bad : {"Shard()", "Shard(seq, ragged)", "Replicat", "", "Shard(seq",
                          "Shard(, padded)", "Shard(seq,)", "Shard(se q)", "Partial(max)"}) {
    INFO("text = '" << bad << "'");
    CHECK_THROWS_AS(parse_placement(bad), shardsim::InputError);
  }
  CHECK_THROWS_WITH(parse_placement("Shard(seq, ragged)"), Catch::Contains("ragged"));
}

TEST_CASE("zigzag split: 2k torch.chunk pieces, rank r holds pieces r and 2k-1-r", "[placement]") {
  // 13 over 2: 4 pieces of c = ceil(13/4) = 4: [0,4) [4,8) [8,12) [12,13). Rank 0 holds pieces
  // 0 and 3 = [0,4)+[12,13) (5 tokens); rank 1 pieces 1 and 2 = [4,8)+[8,12), adjacent, so one
  // run [4,12) (8 tokens).
  const auto s13 = shard_slices(13, 2, SplitPolicy::zigzag);
  CHECK(s13[0] == (Slice{0, 4, 5, 12, 13}));
  CHECK(s13[1] == (Slice{4, 12, 8}));
  CHECK_FALSE(s13[0].contiguous());
  CHECK(s13[1].contiguous());
  // 12 over 3 (PyTorch's divisible case): 6 pieces of 2. Rank 0: pieces 0, 5 = [0,2)+[10,12);
  // rank 1: pieces 1, 4 = [2,4)+[8,10); rank 2: pieces 2, 3 = [4,6)+[6,8) = [4,8).
  const auto s12 = shard_slices(12, 3, SplitPolicy::zigzag);
  CHECK(s12[0] == (Slice{0, 2, 4, 10, 12}));
  CHECK(s12[1] == (Slice{2, 4, 4, 8, 10}));
  CHECK(s12[2] == (Slice{4, 8, 4}));
  // 5 over 4: 8 pieces of 1, the last three empty: [0,1) [1,2) [2,3) [3,4) [4,5) and 3 x [5,5).
  // Ranks 0..2 hold pieces r and 7-r (empty): [0,1) [1,2) [2,3); rank 3 pieces 3, 4 = [3,5).
  CHECK(valid_sizes(shard_slices(5, 4, SplitPolicy::zigzag)) == Sizes{1, 1, 1, 2});
  CHECK(shard_slices(5, 4, SplitPolicy::zigzag)[3] == (Slice{3, 5, 2}));
  // 0 over 2: everyone empty; 1 over 2: pieces [0,1) then three empty: rank 0 [0,1), rank 1 none.
  CHECK(valid_sizes(shard_slices(0, 2, SplitPolicy::zigzag)) == Sizes{0, 0});
  CHECK(valid_sizes(shard_slices(1, 2, SplitPolicy::zigzag)) == Sizes{1, 0});
}

TEST_CASE("zigzag share: local<->global identity, owner, labels", "[placement]") {
  const Slice rank0{0, 4, 5, 12, 13};  // 13 over 2, rank 0 (above)
  CHECK(shardsim::slice_positions(rank0) == Sizes{0, 1, 2, 3, 12});
  CHECK(shardsim::to_global(rank0, 3) == 3);
  CHECK(shardsim::to_global(rank0, 4) == 12);
  CHECK(rank0.holds(12));
  CHECK_FALSE(rank0.holds(4));
  const auto s13 = shard_slices(13, 2, SplitPolicy::zigzag);
  CHECK(shardsim::owner_of(s13, 12) == 0);
  CHECK(shardsim::owner_of(s13, 8) == 1);
  CHECK(shardsim::slice_str("seq", rank0) == "seq[0:4)+[12:13)");
  CHECK(shardsim::slice_label_str(rank0) == "0:4+12:13");
  CHECK(shardsim::slice_label_str(s13[1]) == "4:12");
  const Placement zigzag = shardsim::parse_placement("Shard(seq, zigzag)");
  CHECK(zigzag == Placement::shard("seq", SplitPolicy::zigzag));
  CHECK(zigzag.str() == "Shard(seq, zigzag)");
  CHECK(shardsim::local_shape(shardsim::Shape({{"seq", 13}}), zigzag, 2, 0).extent("seq") == 5);
}

// A process of the mpi transport without the oracle draws only its ranks' input elements
// (distribute_generated, runner load_inputs). Its locals must be those distribute() gives from
// the global tensor: every split policy (padding left zero, zigzag's two runs), a 2-D mesh with a
// Partial dim (only coordinate 0 holds the value), and a mesh restricted to a process's block of
// ranks (held_only). The value of element i is i + 1, so a misplaced element cannot pass.
TEST_CASE("distribute_generated lays out the locals distribute gives from the global tensor",
          "[placement]") {
  using shardsim::Layout;
  using shardsim::Mesh;
  using shardsim::Shape;
  using shardsim::Tensor;
  const Shape shape({{"batch", 2}, {"seq", 13}, {"hidden", 3}});
  Tensor<double> global(shape);
  for (std::int64_t i = 0; i < global.numel(); ++i) global[i] = double(i + 1);
  auto value = [](std::int64_t i) { return double(i + 1); };
  const Mesh mesh_2d({{"dp", 2}, {"cp", 3}});
  const std::vector<std::pair<Mesh, Layout>> cases = {
      {Mesh(4), Layout({Placement::shard("seq")})},
      {Mesh(4), Layout({Placement::shard("seq", SplitPolicy::balanced)})},
      {Mesh(4), Layout({Placement::shard("seq", SplitPolicy::padded)})},
      {Mesh(3), Layout({Placement::shard("seq", SplitPolicy::zigzag)})},
      {Mesh(5), Layout({Placement::shard("hidden")})},
      {Mesh(2), Layout({Placement::replicate()})},
      {mesh_2d, Layout({Placement::shard("batch"), Placement::shard("seq", SplitPolicy::padded)})},
      {mesh_2d, Layout({Placement::partial(), Placement::shard("seq", SplitPolicy::zigzag)})},
      {mesh_2d.held_only(2, 5),
       Layout({Placement::shard("batch"), Placement::shard("seq", SplitPolicy::balanced)})},
  };
  for (const auto& [mesh, layout] : cases) {
    auto shared = std::make_shared<const Mesh>(mesh);
    const auto expected = shardsim::distribute("x", global, layout, shared);
    const auto drawn = shardsim::distribute_generated<double>("x", shape, layout, shared, value);
    REQUIRE(drawn.ranks() == expected.ranks());
    for (int r = 0; r < expected.ranks(); ++r) {
      INFO("layout " << layout.str() << ", rank " << r);
      REQUIRE(drawn.held(r) == expected.held(r));
      if (!expected.held(r)) continue;
      REQUIRE(drawn.local(r).shape() == expected.local(r).shape());
      for (std::int64_t i = 0; i < expected.local(r).numel(); ++i) {
        REQUIRE(drawn.local(r)[i] == expected.local(r)[i]);
      }
    }
  }
}
