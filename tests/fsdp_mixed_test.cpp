// FSDP mixed precision (param_dtype, reduce_dtype): the hop rounding of a reduction in a narrow
// dtype in every reduce order, derived by hand, and the rounding points of a run checked against
// values computed here with narrow.hpp's correctly rounded conversions.
#include "runner/fsdp_mixed.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "compare/compare.hpp"
#include "core/io.hpp"
#include "core/narrow.hpp"
#include "precision/precision_diff.hpp"
#include "runner/runner.hpp"
#include "scenario/scenario.hpp"
#include "core/world-inl.hpp"
#include "fsdp_test_support.hpp"

using shardsim::DistTensor;
using shardsim::Tensor;
using shardsim::TraceEntry;

namespace {

double bf16(double v) {
  using shardsim::NarrowFormat;
  return shardsim::narrow_to_float(NarrowFormat::bf16,
                                   shardsim::narrow_from_double(NarrowFormat::bf16, v));
}

// Addends 256, 1, 1, 1 on 4 ranks. bf16 has 8 significant bits: in [256, 512) its values are
// 2 apart, and a tie goes to the even significand (256 = 1.0000000b x 2^8 and 260 =
// 1.0000010b x 2^8 are even, 258 = 1.0000001b x 2^8 is odd).
//   rank order  ((256 + 1) + 1) + 1: 257 ties to 256, three times           -> 256
//   ring order  one element is chunk 0, summed from rank 1 round the ring:
//               ((1 + 1) + 1) + 256 = 3 + 256 = 259 ties to 260            -> 260
//   tree order  (256 + 1) + (1 + 1) = 256 + 2                               -> 258
// In f32 (or f16: 259 is a multiple of 2^-2, f16's spacing there) every order gives 259.
TEST_CASE("fsdp mixed: a reduction in bf16 rounds every hop, in the world's reduce order",
          "[fsdp][mixed]") {
  using shardsim::ReduceOrder;
  const std::vector<float> a{256, 1, 1, 1};
  const std::vector<const float*> addends{&a[0], &a[1], &a[2], &a[3]};
  const auto sum = [&](ReduceOrder order, const char* dtype) {
    shardsim::World<float> world(4, order, shardsim::Schedule{});
    const auto rounded =
        world.rounding_sums(shardsim::hop_rounding<float>(shardsim::parse_precision(dtype)));
    return rounded.reduce_sum(addends, 1)[0];
  };
  CHECK(sum(ReduceOrder::rank, "bf16") == 256.0f);
  CHECK(sum(ReduceOrder::ring, "bf16") == 260.0f);
  CHECK(sum(ReduceOrder::tree, "bf16") == 258.0f);
  for (ReduceOrder order : {ReduceOrder::rank, ReduceOrder::ring, ReduceOrder::tree}) {
    CHECK(sum(order, "f16") == 259.0f);
    CHECK(sum(order, "f32") == 259.0f);  // the run's own: no rounding
  }
}

// 1 + 2^-8 + 2^-30 lies just above the bf16 midpoint 1 + 2^-8 between 1 and 1 + 2^-7, so it
// rounds up. Through float first it would become the midpoint itself (2^-30 is below half of
// f32's 2^-23 spacing) and tie down to 1: the double is rounded once, directly.
TEST_CASE("fsdp mixed: a double is rounded to bf16 once, not through float", "[fsdp][mixed]") {
  const double v = 1 + 0x1p-8 + 0x1p-30;
  CHECK(shardsim::round_to_dtype(v, shardsim::parse_precision("bf16")) == 1 + 0x1p-7);
  CHECK(shardsim::round_to_dtype(v, shardsim::parse_precision("f32")) == 1 + 0x1p-8);
  CHECK_FALSE(shardsim::dtype_rounds<float>(shardsim::parse_precision("f32")));
  CHECK_FALSE(shardsim::dtype_rounds<double>(shardsim::parse_precision("f64")));
  CHECK(shardsim::dtype_rounds<double>(shardsim::parse_precision("f32")));
}

// y = x W^T + b on dp = 4 ranks (one token each), flat FSDP, param_dtype bf16, reduce_dtype f32,
// at f64: W [hidden=3, feat=5], b [hidden=3], one SGD step.
std::string tiny(const std::string& dtypes) {
  return "name = \"tiny\"\nprecisions = [\"f64\"]\ntrain_steps = 1\nlearning_rate = 0.5\n"
         "fsdp = { style = \"flat\"" +
         dtypes +
         " }\n[mesh]\ndims = { dp = 4 }\n"
         "[[tensors]]\nname = \"x\"\naxes = [\"batch\", \"seq\", \"feat\"]\nshape = [4, 1, 5]\n"
         "placement = \"Shard(batch)\"\n"
         "[[tensors]]\nname = \"t\"\nrole = \"target\"\naxes = [\"batch\", \"seq\", \"hidden\"]\n"
         "shape = [4, 1, 3]\nplacement = \"Shard(batch)\"\n"
         "[[tensors]]\nname = \"w\"\nrole = \"parameter\"\naxes = [\"hidden\", \"feat\"]\n"
         "shape = [3, 5]\ninit = { dist = \"uniform\", low = -1.0, high = 1.0 }\n"
         "[[tensors]]\nname = \"b\"\nrole = \"parameter\"\naxes = [\"hidden\"]\nshape = [3]\n"
         "[[steps]]\nop = \"linear\"\ninput = \"x\"\nweight = \"w\"\nbias = \"b\"\noutput = "
         "\"y\"\n"
         "[[steps]]\nop = \"mse_loss\"\ninput = \"y\"\ntarget = \"t\"\noutput = \"loss\"\n";
}

using fsdp_test::Recorder;
using fsdp_test::replay;
using fsdp_test::Seen;

}  // namespace

// The gathered W (every rank, and the oracle's step) is bf16(W) of the f64 master; the master
// shard is untouched. The flat gradient's reduce-scatter: each rank's addend grad(w)_r (recorded
// before any rounding) rounded to bf16, then summed in rank order with every hop rounded to f32;
// the oracle's: f32(bf16(its gradient)). The update: master - 0.5 x that gradient, in f64.
TEST_CASE("fsdp mixed: the gathered copy, the reduce-scatter and the update", "[fsdp][mixed]") {
  const Recorder r = replay(tiny(", param_dtype = \"bf16\", reduce_dtype = \"f32\""));
  const std::vector<double> master = r.at("input", "w").dense.values();
  const Seen& w = r.at("unflatten", "w");
  bool moved = false;
  for (std::size_t i = 0; i < master.size(); ++i) {
    CHECK(w.dense.values()[i] == bf16(master[i]));
    for (int rank = 0; rank < 4; ++rank)
      CHECK(w.sharded.local(rank).values()[i] == bf16(master[i]));
    moved = moved || bf16(master[i]) != master[i];
  }
  CHECK(moved);  // uniform f32 draws are not all bf16 values
  CHECK(r.at("fsdp_shard", "flat_param.y").sharded.local(0)[0] == master[0]);
  CHECK(!r.at("all_gather", "flat_param.y").entry.notes.empty());  // says where it rounds

  const Seen& gw = r.at("linear_backward", "grad(w)");  // Partial: one addend per rank
  const Seen& gb = r.at("linear_backward", "grad(b)");
  const Seen& reduced = r.at("reduce_scatter", "grad(flat_param.y)");
  const Seen& updated = r.at("sgd", "flat_param.y");
  for (std::int64_t e = 0; e < 18; ++e) {
    const auto addend = [&](int rank) {
      return bf16(e < 15 ? gw.sharded.local(rank)[e] : gb.sharded.local(rank)[e - 15]);
    };
    double sum = addend(0);
    for (int rank = 1; rank < 4; ++rank) sum = static_cast<float>(sum + addend(rank));
    const double dense = e < 15 ? gw.dense[e] : gb.dense[e - 15];
    const int owner = static_cast<int>(e / 5);
    INFO("flat element " << e);
    CHECK(reduced.sharded.local(owner)[e % 5] == sum);
    CHECK(reduced.dense[e] == static_cast<float>(bf16(dense)));
    const double param =
        e < 15 ? master[static_cast<std::size_t>(e)] : r.at("input", "b").dense[e - 15];
    CHECK(updated.sharded.local(owner)[e % 5] == param - 0.5 * sum);
  }
}

// A correct program passes under every policy the loader takes, in every reduce order: the
// bundled flat, per_param and tp x dp fsdp blocks with the dtypes added (bf16 alone reduces in
// bf16; f32 params with a bf16 reduce as FSDP1 allows), at their f32, f64 and mp256 levels. The
// tp x dp block also all-reduces its tp Partial gradients in param_dtype.
TEST_CASE("fsdp mixed: the bundled fsdp blocks pass under each policy and reduce order",
          "[fsdp][mixed][scenario]") {
  for (const char* name : {"fsdp_flat_mlp", "fsdp_per_param_mlp", "mesh_tp_dp_fsdp_mlp"}) {
    const std::string path = std::string(SHARDSIM_SOURCE_DIR) + "/scenarios/" + name + ".toml";
    const std::string text = shardsim::read_file(path);
    for (const char* dtypes :
         {", param_dtype = \"bf16\"", ", param_dtype = \"f32\", reduce_dtype = \"bf16\""}) {
      std::string mixed = text;
      const std::size_t at = mixed.find(" }", mixed.find("\nfsdp = {"));
      REQUIRE(at != std::string::npos);
      mixed.insert(at, dtypes);
      const shardsim::Scenario s = shardsim::parse_scenario(mixed, path);
      for (auto order : {shardsim::ReduceOrder::rank, shardsim::ReduceOrder::ring,
                         shardsim::ReduceOrder::tree}) {
        shardsim::RunOptions options;
        options.reduce_order = order;
        std::vector<shardsim::RunReport> reports;
        for (const shardsim::Precision& p : s.precisions) {
          reports.push_back(shardsim::evaluate(s, p, options));
        }
        INFO(name << dtypes << " " << shardsim::reduce_order_name(order));
        CHECK(shardsim::judge(s, reports).pass);
      }
    }
  }
}

// `shardsim precision` over f32, f64, mp128: the declared bf16 parameters round at every level,
// so a gap cannot shrink along the ladder. A correct program's flat gaps are the dtype's
// rounding (noise, within its 2^-3 everywhere), not bugs; the bf16 reduction where f32 is
// declared stays a bug at the reduce-scatter it breaks (it fails at f64 and mp128).
TEST_CASE("fsdp mixed: the precision ladder reads a declared dtype's flat gap as its noise",
          "[fsdp][mixed][precision]") {
  using shardsim::Verdict;
  const auto ladder = [](const std::string& file) {
    const shardsim::Scenario s =
        shardsim::load_scenario(std::string(SHARDSIM_SOURCE_DIR) + "/scenarios/" + file);
    shardsim::PrecisionDiffOptions options;
    for (const char* level : {"f32", "f64", "mp128"}) {
      options.levels.push_back(shardsim::parse_precision(level));
    }
    return shardsim::precision_diff(s, options);
  };
  const shardsim::PrecisionDiff clean = ladder("fsdp_mixed_bf16_mlp.toml");
  int declared = 0;
  for (const shardsim::BoundaryDiff& b : clean.boundaries) {
    INFO(b.entry.op << " -> " << b.entry.tensor << ": " << b.why);
    CHECK(b.verdict != Verdict::bug);
    if (b.why.starts_with("flat at the declared fsdp dtype bf16")) ++declared;
  }
  CHECK(declared > 0);
  const shardsim::PrecisionDiff fault = ladder("faults/fsdp_reduce_dtype_bf16.toml");
  bool found = false;
  for (const shardsim::BoundaryDiff& b : fault.boundaries) {
    if (b.entry.op != "reduce_scatter" || b.entry.tensor != "grad(flat_param.o)") continue;
    found = true;
    CHECK(b.verdict == Verdict::bug);
  }
  CHECK(found);
}
