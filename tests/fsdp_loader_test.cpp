// The fsdp keys in the scenario loader: the units it builds, and one located error (exit 2 path:
// InputError) for every form it refuses.
#include <catch2/catch.hpp>
#include <string>

#include "core/error.hpp"
#include "core/io.hpp"
#include "scenario/scenario.hpp"

namespace {

using Catch::Contains;

// A linear layer then the loss, on `mesh`; `top` goes before [mesh], `w_placement` is W's.
std::string scenario(const std::string& top, const std::string& mesh = "dims = { dp = 2 }",
                     const std::string& w_placement = "\"Replicate\"",
                     const std::string& x_placement = "\"Shard(batch)\"",
                     const std::string& mesh_dim = "") {
  const std::string dim = mesh_dim.empty() ? "" : "mesh_dim = \"" + mesh_dim + "\"\n";
  return "name = \"f\"\ntrain_steps = 1\n" + top + "\n[mesh]\n" + mesh +
         "\n[[tensors]]\nname = \"x\"\naxes = [\"batch\", \"seq\", \"feat\"]\nshape = [2, 2, 4]\n"
         "placement = " +
         x_placement +
         "\n[[tensors]]\nname = \"t\"\nrole = \"target\"\naxes = [\"batch\", \"seq\", "
         "\"hidden\"]\nshape = [2, 2, 4]\nplacement = " +
         x_placement +
         "\n[[tensors]]\nname = \"w\"\nrole = \"parameter\"\naxes = [\"hidden\", \"feat\"]\n"
         "shape = [4, 4]\nplacement = " +
         w_placement +
         "\n[[tensors]]\nname = \"b\"\nrole = \"parameter\"\naxes = [\"hidden\"]\nshape = [4]\n"
         "[[steps]]\nop = \"linear\"\n" +
         dim +
         "input = \"x\"\nweight = \"w\"\nbias = \"b\"\noutput = \"y\"\n[[steps]]\nop = "
         "\"mse_loss\"\n" +
         dim + "input = \"y\"\ntarget = \"t\"\noutput = \"loss\"\n";
}

void refused(const std::string& text, const std::string& message) {
  INFO(text);
  REQUIRE_THROWS_AS(shardsim::parse_scenario(text, "f.toml"), shardsim::InputError);
  REQUIRE_THROWS_WITH(shardsim::parse_scenario(text, "f.toml"), Contains(message));
}

}  // namespace

TEST_CASE("fsdp: one unit per step that names parameters, in declaration order", "[fsdp]") {
  const auto s = shardsim::parse_scenario(scenario("fsdp = { style = \"flat\" }"), "f.toml");
  REQUIRE(s.fsdp);
  CHECK(s.fsdp->style == shardsim::FsdpSpec::Style::flat);
  CHECK(s.fsdp->dim == 0);  // "dp" by default
  REQUIRE(s.fsdp->units.size() == 1);
  CHECK(s.fsdp->units[0].step == 0);
  CHECK(s.fsdp->units[0].flat_name == "flat_param.y");
  CHECK(s.fsdp->units[0].params == std::vector<std::string>{"w", "b"});
}

TEST_CASE("fsdp: param_dtype and reduce_dtype (MixedPrecision), and their tolerance", "[fsdp]") {
  const auto none = shardsim::parse_scenario(scenario("fsdp = { style = \"flat\" }"), "f.toml");
  CHECK(!none.fsdp->param_dtype);
  CHECK(!none.fsdp->reduce_dtype);
  const auto s = shardsim::parse_scenario(
      scenario("fsdp = { style = \"per_param\", param_dtype = \"bf16\", reduce_dtype = \"f32\" }"),
      "f.toml");
  REQUIRE(s.fsdp->param_dtype);
  REQUIRE(s.fsdp->reduce_dtype);
  CHECK(s.fsdp->param_dtype->name() == "bf16");
  CHECK(s.fsdp->reduce_dtype->name() == "f32");
  // The default rtol is the larger of the run's 2^(16 - bits) and 2^(5 - bits) of every dtype
  // narrower than the run: bf16 (8 bits) gives 2^-3 at f32, f64 and mp256; the f32 reduce is
  // the run's own at f32 and adds 2^(5 - 24) = 2^-19 at f64, below bf16's.
  using shardsim::parse_precision;
  CHECK(s.rtol(parse_precision("f32")).to_double() == 0x1p-3);
  CHECK(s.rtol(parse_precision("f64")).to_double() == 0x1p-3);
  CHECK(s.rtol(parse_precision("mp256")).to_double() == 0x1p-3);
  const auto f32_reduce = shardsim::parse_scenario(
      scenario("fsdp = { style = \"flat\", reduce_dtype = \"f32\" }"), "f.toml");
  CHECK(f32_reduce.rtol(parse_precision("f32")).to_double() == 0x1p-8);   // 2^(16 - 24)
  CHECK(f32_reduce.rtol(parse_precision("f64")).to_double() == 0x1p-19);  // 2^(5 - 24)
  CHECK(f32_reduce.rtol(parse_precision("mp128")).to_double() == 0x1p-19);
  const auto f16 = shardsim::parse_scenario(
      scenario("fsdp = { style = \"flat\", param_dtype = \"f16\" }\n[tolerance]\nf64 = 1e-9"),
      "f.toml");
  CHECK(f16.rtol(parse_precision("f32")).to_double() == 0x1p-6);  // 2^(5 - 11)
  CHECK(f16.rtol(parse_precision("f64")).to_double() == 1e-9);    // [tolerance] overrides
}

TEST_CASE("fsdp: every refused form is a located error", "[fsdp]") {
  refused(scenario("fsdp = { style = \"flat\", param_dtype = \"bf61\" }"),
          "f.toml:3:40: fsdp.param_dtype: unknown dtype 'bf61' (known: bf16, f16, f32, f64; mp "
          "levels are run precisions, not storage dtypes); did you mean 'bf16'?");
  refused(scenario("fsdp = { style = \"flat\", reduce_dtype = \"mp256\" }"),
          "fsdp.reduce_dtype: unknown dtype 'mp256'");
  refused(scenario("fsdp = { style = \"flat\", reduce_dtype = 32 }"), "fsdp.reduce_dtype");
  refused(scenario("fsdp = { style = \"flat\" }\nfaults = [\"fsdp_reduce_dtype_bf16\"]"),
          "faults[0]: fault 'fsdp_reduce_dtype_bf16' reduces in bf16 where the scenario declares "
          "a wider reduce_dtype: give fsdp.reduce_dtype = \"f32\"");
  refused(scenario("fsdp = { style = \"flat\", reduce_dtype = \"bf16\" }\n"
                   "faults = [\"fsdp_reduce_dtype_bf16\"]"),
          "fault 'fsdp_reduce_dtype_bf16' reduces in bf16 where the scenario declares");
  refused(scenario("fsdp = { style = \"flatt\" }"), "fsdp.style: unknown style 'flatt'");
  refused(scenario("fsdp = { dim = \"dp\" }"), "fsdp: missing required key 'style'");
  refused(scenario("fsdp = { style = \"flat\", dim = \"pd\" }"),
          "fsdp.dim: unknown mesh dim 'pd' (the mesh has dp=2); did you mean 'dp'?");
  refused(scenario("fsdp = { style = \"flat\" }", "dims = { a = 2, b = 1 }",
                   "{ a = \"Replicate\" }", "{ a = \"Shard(batch)\" }", "a"),
          "fsdp: the mesh (a=2, b=1) has no dim named dp or fsdp: give dim");
  refused(scenario("fsdp = { style = \"flat\", stage = 3 }"), "unknown key");
  refused(scenario("clip_grad_norm = 0.0"), "clip_grad_norm: clip_grad_norm must be > 0");
  refused(scenario("fsdp = { style = \"flat\" }\nfaults = [\"grad_reduce_mean\"]"),
          "which fsdp replaces by a reduce-scatter");
  refused(scenario("faults = [\"fsdp_stale_shard\"]"), "it needs fsdp = { style, dim }");
  refused(scenario("fsdp = { style = \"per_param\" }\nfaults = [\"fsdp_clip_padding\"]"),
          "needs fsdp style \"flat\" (the padded flat buffer) and clip_grad_norm");
}

// The bundled dp x tp scenario lists dp after tp; listed first, fc1's dim-0 shard on dp would not
// nest inside its tp shard as FSDP2's does. The flat style cannot flatten tp shards.
TEST_CASE("fsdp with tensor parallelism: the mesh order and the style", "[fsdp]") {
  const std::string path = std::string(SHARDSIM_SOURCE_DIR) + "/scenarios/mesh_tp_dp_fsdp_mlp.toml";
  const std::string text = shardsim::read_file(path);
  std::string dp_first = text;
  dp_first.replace(dp_first.find("dims = { tp = 2, dp = 2 }"), 25, "dims = { dp = 2, tp = 2 }");
  refused(dp_first,
          "tensors[4].placement: fsdp per_param shards the first axis 'ffn' of 'fc1.weight' inside "
          "its 'tp' shard (FSDP2's _StridedShard), and shardsim nests shards in mesh order: write "
          "'dp' after 'tp' in mesh.dims (e.g. dims = { tp = 2, dp = 2 })");
  std::string flat = text;
  flat.replace(flat.find("style = \"per_param\""), 19, "style = \"flat\"");
  refused(flat,
          "tensors[4].placement: fsdp style \"flat\" flattens whole parameters: "
          "'fc1.weight' is sharded on mesh dim 'tp'; use style = \"per_param\"");
}

// A column-parallel layer on the dp dim: W Shard(hidden) there is a valid step, but not under
// fsdp, which shards W on dp itself.
TEST_CASE("fsdp: a parameter sharded on the fsdp dim by its placement is refused", "[fsdp]") {
  refused(
      "name = \"f\"\ntrain_steps = 1\nfsdp = { style = \"flat\" }\n[mesh]\ndims = { dp = 2 }\n"
      "[[tensors]]\nname = \"x\"\naxes = [\"batch\", \"seq\", \"feat\"]\nshape = [2, 2, 4]\n"
      "[[tensors]]\nname = \"t\"\nrole = \"target\"\naxes = [\"batch\", \"seq\", \"hidden\"]\n"
      "shape = [2, 2, 4]\n[[tensors]]\nname = \"w\"\nrole = \"parameter\"\n"
      "axes = [\"hidden\", \"feat\"]\nshape = [4, 4]\nplacement = \"Shard(hidden)\"\n"
      "[[steps]]\nop = \"linear\"\ninput = \"x\"\nweight = \"w\"\noutput = \"y\"\n"
      "parallel = \"column\"\n[[steps]]\nop = \"redistribute\"\ninput = \"y\"\noutput = "
      "\"y.full\"\nto = \"Replicate\"\n[[steps]]\nop = \"mse_loss\"\ninput = \"y.full\"\n"
      "target = \"t\"\noutput = \"loss\"\n",
      "f.toml:15:1: tensors[2].placement: under fsdp a parameter is Replicate on 'dp' (the "
      "layout its step computes with); fsdp shards it there itself, but 'w' has Shard(hidden)");
}

TEST_CASE("fsdp: a parameter named by two steps, and [stream], are refused", "[fsdp]") {
  std::string twice = scenario("fsdp = { style = \"flat\" }");
  twice.replace(twice.find("[[steps]]\nop = \"mse_loss\""), 0,
                "[[steps]]\nop = \"layer_norm\"\ninput = \"y\"\nweight = \"b\"\noutput = \"z\"\n");
  twice.replace(twice.find("input = \"y\"\ntarget"), 11, "input = \"z\"");
  refused(twice,
          "steps[1].weight: under fsdp a parameter belongs to one step's unit; 'b' is "
          "already named by steps[0]");
  refused(scenario("fsdp = { style = \"flat\" }") + "[stream]\naxis = \"seq\"\nchunks = [1, 1]\n",
          "stream: fsdp with [stream] is not supported");
  const std::string no_training = scenario("clip_grad_norm = 1.0");
  refused(no_training.substr(0, 10) + no_training.substr(no_training.find('\n', 10) + 16),
          "clipping needs train_steps");
}
