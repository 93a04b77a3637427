// Fully sharded data parallelism on a tiny linear layer whose layouts and memory are derived by
// hand: the flat (FSDP1) and per-parameter (FSDP2) shards, padding and empty shards, the
// parameter-memory figures, and gradient-norm clipping against a norm computed here from the
// oracle's gradients.
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "compare/compare.hpp"
#include "runner/runner.hpp"
#include "scenario/scenario.hpp"
#include "fsdp_test_support.hpp"

using shardsim::DistTensor;
using shardsim::Tensor;
using shardsim::TraceEntry;

namespace {

// y = x W^T + b on dp = 4 ranks, W [hidden=3, feat=5], b [hidden=3], x one token per rank.
std::string tiny(const std::string& style, const std::string& extra = "",
                 const std::string& dtypes = "") {
  return "name = \"tiny\"\nprecisions = [\"f64\"]\ntrain_steps = 1\nlearning_rate = 0.5\n"
         "fsdp = { style = \"" +
         style + "\"" + dtypes + " }\n" + extra +
         "[mesh]\ndims = { dp = 4 }\n"
         "[[tensors]]\nname = \"x\"\naxes = [\"batch\", \"seq\", \"feat\"]\nshape = [4, 1, 5]\n"
         "placement = \"Shard(batch)\"\n"
         "[[tensors]]\nname = \"t\"\nrole = \"target\"\naxes = [\"batch\", \"seq\", \"hidden\"]\n"
         "shape = [4, 1, 3]\nplacement = \"Shard(batch)\"\n"
         "[[tensors]]\nname = \"w\"\nrole = \"parameter\"\naxes = [\"hidden\", \"feat\"]\n"
         "shape = [3, 5]\n"
         "[[tensors]]\nname = \"b\"\nrole = \"parameter\"\naxes = [\"hidden\"]\nshape = [3]\n"
         "[[steps]]\nop = \"linear\"\ninput = \"x\"\nweight = \"w\"\nbias = \"b\"\noutput = "
         "\"y\"\n"
         "[[steps]]\nop = \"mse_loss\"\ninput = \"y\"\ntarget = \"t\"\noutput = \"loss\"\n";
}

using fsdp_test::Recorder;
using fsdp_test::replay;
using fsdp_test::Seen;

// concat(W row-major, b): the flat parameter's 18 values.
std::vector<double> flat_values(const Recorder& r, const std::string& op) {
  std::vector<double> flat = r.at(op, "w").dense.values();
  for (double v : r.at(op, "b").dense.values()) flat.push_back(v);
  return flat;
}

}  // namespace

// N = 15 + 3 = 18 over k = 4: c = ceil(18/4) = 5 per rank; rank r holds flat [5r, 5r + 5) cut at
// 18: [0:5), [5:10), [10:15), [15:18) + 2 zero pads (the whole of b on rank 3).
TEST_CASE("flat: the unit's parameters concatenated, padded to 4 x 5, split evenly", "[fsdp]") {
  const Recorder r = replay(tiny("flat"));
  const std::vector<double> flat = flat_values(r, "input");
  const Seen& shard = r.at("fsdp_shard", "flat_param.y");
  CHECK(shard.entry.layout.str() == "Shard(flat, padded)");
  for (int rank = 0; rank < 4; ++rank) {
    const Tensor<double>& local = shard.sharded.local(rank);
    REQUIRE(local.numel() == 5);
    for (int i = 0; i < 5; ++i) {
      const int global = 5 * rank + i;
      CHECK(local[i] == (global < 18 ? flat[static_cast<std::size_t>(global)] : 0.0));
    }
  }
  CHECK(r.at("fsdp_shard", "flat_param.y").entry.ranks[3].slice == "flat[15:18)+2pad");
  // The gathered views are the parameters, every rank a whole copy.
  const Seen& w = r.at("unflatten", "w");
  for (int rank = 0; rank < 4; ++rank) CHECK(w.sharded.local(rank).values() == w.dense.values());
}

// torch.chunk of 3 rows over 4: 1, 1, 1, 0 (rank 3 holds an empty shard of W and of b).
TEST_CASE("per_param: dim-0 chunks with an empty shard", "[fsdp]") {
  const Recorder r = replay(tiny("per_param"));
  const Seen& w = r.at("fsdp_shard", "w");
  CHECK(w.entry.layout.str() == "Shard(hidden)");
  for (int rank = 0; rank < 3; ++rank) {
    const Tensor<double>& local = w.sharded.local(rank);
    REQUIRE(local.numel() == 5);
    for (int i = 0; i < 5; ++i) CHECK(local[i] == w.dense[5 * rank + i]);
  }
  CHECK(w.sharded.local(3).numel() == 0);
  CHECK(r.at("fsdp_shard", "b").sharded.local(3).numel() == 0);
}

// Parameter memory at f64 (8 bytes per element), every rank alike:
//   flat:      shard c = 5 -> 40 bytes; gathered k c = 20 -> 160 bytes.
//   per_param: FSDP2 pads each chunk to ceil(3/4) = 1 row: W 1 x 5 + b 1 = 6 -> 48 bytes;
//              gathered 4 x 6 = 24 -> 192 bytes.
// Gradient shards equal the parameter shards, the unsharded gradients the gathered peak, and
// plain SGD keeps no optimizer state.
TEST_CASE("parameter memory per rank, derived by hand", "[fsdp][memory]") {
  const auto check = [](const std::string& style, std::int64_t shard, std::int64_t gathered) {
    const Recorder r = replay(tiny(style));
    REQUIRE(r.memory.parameters);
    const shardsim::ParameterMemory& m = *r.memory.parameters;
    CHECK(m.style == style);
    CHECK(m.dim == "dp");
    CHECK(m.sharded_params == std::vector<std::int64_t>(4, shard));
    CHECK(m.sharded_grads == std::vector<std::int64_t>(4, shard));
    CHECK(m.optimizer_state == std::vector<std::int64_t>(4, 0));
    CHECK(m.gathered_peak == std::vector<std::int64_t>(4, gathered));
    CHECK(m.unsharded_grads_peak == std::vector<std::int64_t>(4, gathered));
  };
  check("flat", 40, 160);
  check("per_param", 48, 192);
}

// Mixed precision on the same f64 run: master shards and gradient shards stay 8 bytes per
// element; the gathered copy counts param_dtype's bytes; the unsharded gradients param_dtype's
// (autograd's) plus, when reduce_dtype differs, the reduce_dtype copy the reduce-scatter reads.
//   bf16 / f32, flat:      gathered 20 x 2 = 40; gradients 20 x (2 + 4) = 120.
//   bf16 / f32, per_param: gathered 24 x 2 = 48; gradients 24 x (2 + 4) = 144.
//   f32 alone (reduce_dtype defaults to param_dtype, as in PyTorch), flat: gathered 20 x 4 = 80,
//   gradients 20 x 4 = 80 (no cast).
//   f64 on an f64 run is the run's own: the figures of the plain run (160, 160).
TEST_CASE("parameter memory per rank with param_dtype and reduce_dtype, derived by hand",
          "[fsdp][memory]") {
  const auto check = [](const std::string& style, const std::string& dtypes, std::int64_t shard,
                        std::int64_t gathered, std::int64_t grads) {
    const Recorder r = replay(tiny(style, "", dtypes));
    REQUIRE(r.memory.parameters);
    const shardsim::ParameterMemory& m = *r.memory.parameters;
    INFO(style << dtypes);
    CHECK(m.sharded_params == std::vector<std::int64_t>(4, shard));
    CHECK(m.sharded_grads == std::vector<std::int64_t>(4, shard));
    CHECK(m.optimizer_state == std::vector<std::int64_t>(4, 0));
    CHECK(m.gathered_peak == std::vector<std::int64_t>(4, gathered));
    CHECK(m.unsharded_grads_peak == std::vector<std::int64_t>(4, grads));
  };
  const std::string bf16_f32 = ", param_dtype = \"bf16\", reduce_dtype = \"f32\"";
  check("flat", bf16_f32, 40, 40, 120);
  check("per_param", bf16_f32, 48, 48, 144);
  check("flat", ", param_dtype = \"f32\"", 40, 80, 80);
  check("flat", ", param_dtype = \"f64\"", 40, 160, 160);
}

// The norm is computed here from the oracle's gradients of W and b (before clipping):
// total = sqrt(sum g^2), coef = 1e-3 / (total + 1e-6) < 1, and every rank's updated flat shard
// is its slice of concat(W - 0.5 coef gW, b - 0.5 coef gb).
TEST_CASE("clip_grad_norm: the global norm over the shards, then SGD on the shards", "[fsdp]") {
  const Recorder r = replay(tiny("flat", "clip_grad_norm = 1e-3\n"));
  const Tensor<double>& gw = r.at("linear_backward", "grad(w)").dense;
  const Tensor<double>& gb = r.at("linear_backward", "grad(b)").dense;
  double squares = 0;
  for (double g : gw.values()) squares += g * g;
  for (double g : gb.values()) squares += g * g;
  const double total = std::sqrt(squares);
  const double coef = 1e-3 / (total + 1e-6);
  REQUIRE(coef < 1);
  const Seen& norm = r.at("clip_grad_norm", "grad_norm");
  const Seen& clip = r.at("clip_grad_norm", "grad_norm.clip_coef");
  for (int rank = 0; rank < 4; ++rank) {
    // Sums in another order: a few ulps.
    CHECK(norm.sharded.local(rank)[0] == Approx(total).epsilon(1e-14));
    CHECK(clip.sharded.local(rank)[0] == Approx(coef).epsilon(1e-14));
  }
  std::vector<double> updated = flat_values(r, "input");
  std::vector<double> grads = gw.values();
  for (double g : gb.values()) grads.push_back(g);
  for (std::size_t i = 0; i < updated.size(); ++i) updated[i] -= 0.5 * coef * grads[i];
  const Seen& sgd = r.at("sgd", "flat_param.y");
  for (int rank = 0; rank < 4; ++rank) {
    for (int i = 0; i < 5 && 5 * rank + i < 18; ++i) {
      CHECK(sgd.sharded.local(rank)[i] ==
            Approx(updated[static_cast<std::size_t>(5 * rank + i)]).epsilon(1e-14));
    }
  }
}
