// N-D meshes in the scenario loader: [mesh] dims, per-dim placements (list or table), the
// steps' mesh_dim, nested sharding, and one clean located error (exit 2 path: InputError) for
// each malformed form. Expected local slices are derived by hand from torch.chunk, dim by dim.
#include <catch2/catch.hpp>
#include <string>

#include "core/error.hpp"
#include "core/placement.hpp"
#include "scenario/scenario.hpp"

namespace {

using Catch::Contains;
using shardsim::Layout;
using shardsim::Mesh;
using shardsim::Placement;

// A LayerNorm scenario on `mesh` (TOML value of [mesh]) with x placed as `placement` and the step
// on `mesh_dim` (omitted when empty).
std::string scenario(const std::string& mesh, const std::string& placement,
                     const std::string& mesh_dim) {
  return "name = \"m\"\n[mesh]\n" + mesh +
         "\n[[tensors]]\nname = \"x\"\naxes = [\"batch\", \"seq\", \"hidden\"]\n"
         "shape = [2, 13, 8]\ninit = { dist = \"normal\", mean = 0.0, std = 1.0 }\n"
         "placement = " +
         placement + "\n[[steps]]\nop = \"layer_norm\"\n" +
         (mesh_dim.empty() ? "" : "mesh_dim = \"" + mesh_dim + "\"\n") +
         "input = \"x\"\noutput = \"y\"\n";
}

}  // namespace

TEST_CASE("[mesh] dims keeps the written order and multiplies to the rank count", "[mesh]") {
  const auto s = shardsim::parse_scenario(
      scenario("dims = { tp = 3, dp = 2 }", "{ dp = \"Shard(batch)\", tp = \"Shard(seq)\" }", "tp"),
      "m.toml");
  const Mesh& mesh = s.mesh.devices;
  REQUIRE(mesh.ndim() == 2);
  CHECK(mesh.dim(0).name == "tp");  // written first, although "dp" sorts first
  CHECK(mesh.dim(1).name == "dp");
  CHECK(s.mesh.ranks() == 6);
  // Row-major coordinates: the last dim varies fastest, rank 1 = (tp=0, dp=1).
  CHECK(mesh.coord(1, 0) == 0);
  CHECK(mesh.coord(1, 1) == 1);
  CHECK(mesh.coord(5, 0) == 2);
  // The table form fills each named dim; the list form is in mesh order.
  const Layout& layout = s.tensors[0].layout;
  CHECK(layout.on(0) == Placement::shard("seq"));
  CHECK(layout.on(1) == Placement::shard("batch"));
}

TEST_CASE("nested sharding of one axis follows DTensor: the later dim splits the earlier piece",
          "[mesh]") {
  // seq = 13 on dp = 2 (torch.chunk: 7, 6), then each piece on tp = 3: 7 -> 3, 3, 1 and
  // 6 -> 2, 2, 2. Global offsets add: rank (dp=1, tp=2) holds 7 + 4 = 11 .. 13.
  const auto s = shardsim::parse_scenario(
      scenario("dims = { dp = 2, tp = 3 }", "[\"Shard(seq)\", \"Shard(seq)\"]", "dp"), "m.toml");
  const Mesh& mesh = s.mesh.devices;
  const Layout& layout = s.tensors[0].layout;
  const shardsim::Shape& global = s.tensors[0].shape;
  const std::int64_t begins[6] = {0, 3, 6, 7, 9, 11};
  const std::int64_t ends[6] = {3, 6, 7, 9, 11, 13};
  for (int r = 0; r < 6; ++r) {
    INFO("rank " << r);
    const shardsim::Slice slice = shardsim::axis_slice(global, layout, mesh, r, "seq");
    CHECK(slice.begin == begins[r]);
    CHECK(slice.end == ends[r]);
    CHECK(shardsim::local_shape(global, layout, mesh, r).extent("seq") == ends[r] - begins[r]);
    CHECK(shardsim::axis_slice(global, layout, mesh, r, "batch").valid() == 2);
  }
}

TEST_CASE("malformed N-D meshes and placements get one located error", "[mesh]") {
  struct Case {
    std::string mesh, placement, mesh_dim, message;
  };
  const Case cases[] = {
      {"ranks = 4\ndims = { dp = 2 }", "\"Replicate\"", "", "either ranks or dims"},
      {"dims = {}", "\"Replicate\"", "", "at least one dim"},
      {"dims = { dp = 0 }", "\"Replicate\"", "", "must be in [1, 4096]"},
      {"dims = { dp = 64, tp = 128 }", "\"Replicate\"", "dp", "more than 4096 ranks"},
      {"dims = { dp = 2, tp = 2 }", "\"Shard(seq)\"", "tp", "one placement per dim"},
      {"dims = { dp = 2, tp = 2 }", "[\"Shard(seq)\"]", "tp", "one placement per mesh dim"},
      {"dims = { dp = 2, tp = 2 }", "{ pt = \"Shard(seq)\" }", "tp", "did you mean 'tp'"},
      {"dims = { dp = 2, tp = 2 }", "{ tp = \"Shard(sequence)\" }", "tp", "unknown axis"},
      {"dims = { dp = 2, tp = 2 }", "{ tp = \"Shard(seq)\" }", "", "mesh_dim"},
      {"dims = { dp = 2, tp = 2 }", "{ tp = \"Shard(seq)\" }", "cp", "cp"},
      // LayerNorm on tp needs whole rows of 'hidden' on the other dims.
      {"dims = { dp = 2, tp = 2 }", "{ dp = \"Shard(hidden)\" }", "tp", "needs whole 'hidden'"},
      // A zigzag share is two runs: no other dim may cut it again (or be cut by it).
      {"dims = { cp = 2, tp = 2 }", "[\"Shard(seq, zigzag)\", \"Shard(seq)\"]", "tp",
       "mesh dims 'cp' and 'tp' both shard 'seq', and a zigzag share cannot nest"},
      {"dims = { cp = 2, tp = 2 }", "{ cp = \"Shard(seq)\", tp = \"Shard(seq, zigzag)\" }", "tp",
       "cannot nest"},
      {"ranks = 2", "\"Shard(seq, zigzig)\"", "", "unknown split policy 'zigzig'"},
  };
  for (const Case& c : cases) {
    INFO(c.mesh << " | " << c.placement << " | mesh_dim " << c.mesh_dim);
    const std::string text = scenario(c.mesh, c.placement, c.mesh_dim);
    CHECK_THROWS_AS(shardsim::parse_scenario(text, "m.toml"), shardsim::InputError);
    CHECK_THROWS_WITH(shardsim::parse_scenario(text, "m.toml"),
                      Contains("m.toml:") && Contains(c.message));
  }
}

TEST_CASE("redistribute on an outer dim cannot re-cut an axis a later dim already shards",
          "[mesh]") {
  // x [batch=1, seq=8, hidden=4] is [Replicate, Shard(seq)] on dp=2 x tp=2. Sharding seq on dp
  // now would need each tp member's piece cut from the dp piece it does not hold (rank (dp=0,
  // tp=1) holds seq 4:8 but dp=0's half is 0:4): refused at the step's `to`, like the gather.
  const std::string text = R"toml(name = "m"
[mesh]
dims = { dp = 2, tp = 2 }
[[tensors]]
name = "x"
axes = ["batch", "seq", "hidden"]
shape = [1, 8, 4]
init = { dist = "normal", mean = 0.0, std = 1.0 }
placement = ["Replicate", "Shard(seq)"]
[[steps]]
op = "redistribute"
mesh_dim = "dp"
input = "x"
output = "y"
to = "Shard(seq)"
)toml";
  CHECK_THROWS_WITH(shardsim::parse_scenario(text, "m.toml"),
                    Contains("m.toml:") && Contains("steps[0].to") &&
                        Contains("already sharded on a later mesh dim"));
  // Sharding another axis on dp is fine.
  std::string other = text;
  other.replace(other.find("to = \"Shard(seq)\""), 17, "to = \"Shard(batch)\"");
  CHECK_NOTHROW(shardsim::parse_scenario(other, "m.toml"));
  // A zigzag target on tp under dp's seq pieces would nest a two-run share: refused at `to`.
  std::string zigzag = text;
  zigzag.replace(zigzag.find("[\"Replicate\", \"Shard(seq)\"]"), 27, "[\"Shard(seq)\", \"Replicate\"]");
  zigzag.replace(zigzag.find("mesh_dim = \"dp\""), 15, "mesh_dim = \"tp\"");
  zigzag.replace(zigzag.find("to = \"Shard(seq)\""), 17, "to = \"Shard(seq, zigzag)\"");
  CHECK_THROWS_WITH(shardsim::parse_scenario(zigzag, "m.toml"),
                    Contains("m.toml:") && Contains("steps[0].to") && Contains("cannot nest"));
}
