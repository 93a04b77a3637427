// A bf16/f16 run's LayerNorm stores (LayerNormParams::store, BoundaryLabel::stored): the kernels
// round y and dx to the storage format as they write them, and the boundaries that record them
// then round nothing again. The reference for every rounded value is storage.hpp's scalar
// round_to_narrow (the boundary's own rounding, tested against narrow.hpp's conversion, which is
// tested exhaustively against MPFR) applied to the same kernel's f32 value without `store`.
#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "compare/compare.hpp"
#include "core/lane_isa.hpp"
#include "core/storage.hpp"
#include "lane_isa_test_support.hpp"
#include "ops/layer_norm/layer_norm.hpp"
#include "runner/runner.hpp"
#include "scenario/scenario.hpp"
#include "tensor_test_support.hpp"

using lane_test::EachIsa;
using shardsim::LaneIsa;
using shardsim::LayerNormParams;
using shardsim::LayerNormSaved;
using shardsim::NarrowFormat;
using shardsim::Shape;
using shardsim::Tensor;
using tensor_test::normal;
using tensor_test::seeded;
using tensor_test::uniform;

namespace {

constexpr NarrowFormat kFormats[] = {NarrowFormat::bf16, NarrowFormat::f16};

std::uint32_t bits_of(float v) { return std::bit_cast<std::uint32_t>(v); }

// Elements of `stored` whose bits are not those of round_to_narrow(format, plain[i]).
std::int64_t unrounded(const Tensor<float>& stored, const Tensor<float>& plain,
                       NarrowFormat format) {
  REQUIRE(stored.numel() == plain.numel());
  std::int64_t bad = 0;
  for (std::int64_t i = 0; i < plain.numel(); ++i) {
    bad += bits_of(stored[i]) != bits_of(shardsim::round_to_narrow(format, plain[i]));
  }
  return bad;
}

std::int64_t differing(const Tensor<float>& a, const Tensor<float>& b) {
  REQUIRE(a.numel() == b.numel());
  std::int64_t bad = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i) bad += bits_of(a[i]) != bits_of(b[i]);
  return bad;
}

// x[5, 21, inner] normalized over its middle axis: 21 positions are two lane vectors of 8 and a
// scalar tail of 5; inner = 1 gives contiguous rows (the lane passes, where bf16 is rounded in
// the vector stores), inner = 2 strided ones (the element loop). Row 1 holds a NaN (its y and dx
// are NaN: the quiet NaN keeps its sign), and the last position's weight is 3e38 (y is near the
// largest float there, and overflows to inf in row 0).
struct Case {
  Tensor<float> x, dy, w, b;
  explicit Case(std::int64_t inner) {
    const Shape shape({{"seq", 5}, {"hidden", 21}, {"batch", inner}});
    x = seeded<float>(shape, normal(0.5, 2.0), 31);
    dy = seeded<float>(shape, normal(0.0, 1.0), 32);
    w = seeded<float>(Shape({{"hidden", 21}}), uniform(0.5, 1.5), 33);
    b = seeded<float>(Shape({{"hidden", 21}}), uniform(-0.25, 0.25), 34);
    x[(1 * 21 + 3) * inner] = -std::numeric_limits<float>::quiet_NaN();
    // Row 0's last position far from its mean (norm about 3) times 3e38: y overflows to inf.
    x[20 * inner] = 10.0f;
    w[20] = 3.0e38f;
  }
};

}  // namespace

TEST_CASE(
    "LayerNorm stores: with store set the kernels write y and dx as the boundary's rounding of "
    "their f32 values, and change nothing else",
    "[layer_norm][storage]") {
  EachIsa isas;
  for (const LaneIsa isa : isas.all()) {
    shardsim::set_lane_isa(isa);
    for (const std::int64_t inner : {1, 2}) {
      for (const NarrowFormat format : kFormats) {
        INFO("isa " << (isa == LaneIsa::avx2 ? "avx2" : "sse2") << ", inner " << inner << ", "
                    << shardsim::narrow_name(format));
        const Case c(inner);
        LayerNormParams plain, stored;
        stored.store = format;
        Tensor<float> y, dx, dw(c.w.shape()), db(c.b.shape());
        Tensor<float> ys, dxs, dws(c.w.shape()), dbs(c.b.shape());
        LayerNormSaved<float> saved, saved_s;
        shardsim::layer_norm_forward(c.x, &c.w, &c.b, plain, y, saved);
        shardsim::layer_norm_forward(c.x, &c.w, &c.b, stored, ys, saved_s);
        shardsim::layer_norm_backward(c.dy, c.x, &c.w, saved, plain, dx, &dw, &db);
        shardsim::layer_norm_backward(c.dy, c.x, &c.w, saved_s, stored, dxs, &dws, &dbs);
        CHECK(unrounded(ys, y, format) == 0);
        CHECK(unrounded(dxs, dx, format) == 0);
        // The statistics and the parameter gradients are not stores of this pass.
        CHECK(differing(saved_s.mean, saved.mean) == 0);
        CHECK(differing(saved_s.rstd, saved.rstd) == 0);
        CHECK(differing(dws, dw) == 0);
        CHECK(differing(dbs, db) == 0);
        // The case reaches the paths it is for: a NaN, an infinity, and values that change.
        CHECK(std::isnan(ys[21 * inner]));
        CHECK(std::isinf(ys[20 * inner]));
        CHECK(differing(ys, y) > 0);
        // In place (y is x): the same stores.
        Tensor<float> in_place = c.x;
        LayerNormSaved<float> saved_in_place;
        shardsim::layer_norm_forward(in_place, &c.w, &c.b, stored, in_place, saved_in_place);
        CHECK(differing(in_place, ys) == 0);
      }
    }
  }
}

TEST_CASE(
    "LayerNorm stores: the padded passes (apply, backward apply) round the valid positions and "
    "keep the pad positions 0",
    "[layer_norm][storage]") {
  // A padded slice of a hidden-sharded row: positions [19, 21) are padding.
  const std::int64_t valid = 19;
  EachIsa isas;
  for (const LaneIsa isa : isas.all()) {
    shardsim::set_lane_isa(isa);
    for (const NarrowFormat format : kFormats) {
      INFO("isa " << (isa == LaneIsa::avx2 ? "avx2" : "sse2") << ", "
                  << shardsim::narrow_name(format));
      const Case c(1);
      LayerNormParams plain, stored;
      stored.store = format;
      LayerNormSaved<float> stats;
      shardsim::layer_norm_stats(c.x, plain, shardsim::LayerNormFaults{}, stats);
      Tensor<float> y, ys, sum, sum_norm, dx, dxs;
      shardsim::layer_norm_apply(c.x, &c.w, &c.b, stats, plain, {}, valid, y);
      shardsim::layer_norm_apply(c.x, &c.w, &c.b, stats, stored, {}, valid, ys);
      CHECK(unrounded(ys, y, format) == 0);
      shardsim::layer_norm_backward_sums(c.dy, c.x, &c.w, stats, plain, valid, sum, sum_norm);
      shardsim::layer_norm_backward_apply<float>(c.dy, c.x, &c.w, stats, sum, sum_norm, 21, plain,
                                                 valid, dx, nullptr, nullptr);
      shardsim::layer_norm_backward_apply<float>(c.dy, c.x, &c.w, stats, sum, sum_norm, 21, stored,
                                                 valid, dxs, nullptr, nullptr);
      CHECK(unrounded(dxs, dx, format) == 0);
      for (std::int64_t row = 0; row < 5; ++row) {
        for (std::int64_t i = valid; i < 21; ++i) {
          CHECK(bits_of(ys[row * 21 + i]) == 0);
          CHECK(bits_of(dxs[row * 21 + i]) == 0);
        }
      }
    }
  }
}

TEST_CASE("LayerNorm stores: store changes nothing at f64", "[layer_norm][storage]") {
  const Shape shape({{"seq", 3}, {"hidden", 21}});
  const auto x = seeded<double>(shape, normal(0.5, 2.0), 41);
  LayerNormParams plain, stored;
  stored.store = NarrowFormat::bf16;
  Tensor<double> y, ys;
  LayerNormSaved<double> saved;
  shardsim::layer_norm_forward<double>(x, nullptr, nullptr, plain, y, saved);
  shardsim::layer_norm_forward<double>(x, nullptr, nullptr, stored, ys, saved);
  CHECK(y.values() == ys.values());
}

namespace {

// Checks every boundary a narrow run stores (entry.narrow): each value of the oracle's tensor
// and of every rank's is already in the storage format, i.e. the kernels that claimed to have
// rounded (BoundaryLabel::stored, so the boundary rounded nothing) did.
class StoredValues final : public shardsim::BoundarySink<float> {
 public:
  explicit StoredValues(NarrowFormat format) : format_(format) {}
  bool on_boundary(const shardsim::TraceEntry& entry, const Tensor<float>* dense,
                   const shardsim::DistTensor<float>& sharded) override {
    if (!entry.narrow) return true;
    ++narrow_;
    if (entry.op == "layer_norm" || entry.op == "layer_norm_backward") ++layer_norm_;
    const auto check = [&](const Tensor<float>& t) {
      for (std::int64_t i = 0; i < t.numel(); ++i) {
        const float v = t[i];
        if (bits_of(v) != bits_of(shardsim::round_to_narrow(format_, v))) {
          ++unrounded_;
          UNSCOPED_INFO("boundary " << entry.id << " " << entry.op << " -> " << entry.tensor
                                    << " holds an unrounded value at " << i);
          return;
        }
      }
    };
    if (dense) check(*dense);
    for (const Tensor<float>& local : sharded.locals) check(local);
    return true;
  }
  int narrow_ = 0, layer_norm_ = 0, unrounded_ = 0;

 private:
  NarrowFormat format_;
};

// LayerNorm on x[2, 7, 18] (18 positions: two lane vectors and a tail of 2) over 4 ranks, with
// x, weight and bias placed as given, masked MSE on y moved to Shard(seq), 2 SGD steps: y and
// grad(x) are recorded by the LayerNorm plans.
std::string scenario_text(const std::string& x_placement, const std::string& param_placement,
                          const std::string& stats) {
  std::string tensors;
  const auto tensor = [&](const std::string& name, const std::string& role, const std::string& axes,
                          const std::string& shape, const std::string& init,
                          const std::string& placement) {
    tensors += "[[tensors]]\nname = \"" + name + "\"\n" + role + "axes = " + axes +
               "\nshape = " + shape + "\ninit = " + init + "\nplacement = \"" + placement + "\"\n";
  };
  tensor("x", "", "[\"batch\", \"seq\", \"hidden\"]", "[2, 7, 18]",
         "{ dist = \"normal\", mean = 0.25, std = 1.5 }", x_placement);
  tensor("target", "role = \"target\"\n", "[\"batch\", \"seq\", \"hidden\"]", "[2, 7, 18]",
         "{ dist = \"uniform\", low = -1.0, high = 1.0 }", "Shard(seq)");
  tensor("ln.weight", "role = \"parameter\"\n", "[\"hidden\"]", "[18]",
         "{ dist = \"uniform\", low = 0.5, high = 1.5 }", param_placement);
  tensor("ln.bias", "role = \"parameter\"\n", "[\"hidden\"]", "[18]",
         "{ dist = \"uniform\", low = -0.25, high = 0.25 }", param_placement);
  return "name = \"stores\"\nseed = 11\nprecisions = [\"bf16\"]\ntrain_steps = 2\n"
         "learning_rate = 0.1\n[mesh]\nranks = 4\n" +
         tensors +
         "[[steps]]\nop = \"layer_norm\"\ninput = \"x\"\nweight = \"ln.weight\"\n"
         "bias = \"ln.bias\"\noutput = \"y\"\neps = 1e-5\n" +
         (stats.empty() ? "" : "stats = \"" + stats + "\"\n") +
         "[[steps]]\nop = \"redistribute\"\ninput = \"y\"\noutput = \"y.tokens\"\n"
         "to = \"Shard(seq)\"\n"
         "[[steps]]\nop = \"mse_loss\"\ninput = \"y.tokens\"\ntarget = \"target\"\n"
         "output = \"loss\"\nvalid_lengths = [7, 4]\n[expect]\nverdict = \"pass\"\n";
}

}  // namespace

TEST_CASE(
    "LayerNorm stores: a bf16 or f16 run records only rounded values at every stored boundary, on "
    "every LayerNorm plan, and passes",
    "[layer_norm][storage][runner]") {
  struct Plan {
    const char* name;
    const char* x;
    const char* params;
    const char* stats;
  };
  const Plan plans[] = {
      {"row-sharded", "Shard(seq)", "Replicate", ""},
      {"replicated", "Replicate", "Replicate", ""},
      {"hidden sum_sumsq", "Shard(hidden, padded)", "Shard(hidden, padded)", "sum_sumsq"},
      {"hidden welford", "Shard(hidden, padded)", "Shard(hidden, padded)", "welford"},
      {"hidden redistribute", "Shard(hidden, padded)", "Shard(hidden, padded)", "redistribute"},
  };
  for (const Plan& plan : plans) {
    for (const NarrowFormat format : kFormats) {
      INFO(plan.name << ", " << shardsim::narrow_name(format));
      const shardsim::Scenario scenario =
          shardsim::parse_scenario(scenario_text(plan.x, plan.params, plan.stats), "stores");
      StoredValues sink(format);
      shardsim::run_scenario<float>(scenario, shardsim::RunOptions{}, sink, format);
      CHECK(sink.unrounded_ == 0);
      CHECK(sink.layer_norm_ >= 4);  // y and grad(x), in each of the 2 steps
      // The whole run: every boundary as the comparator judges it.
      const shardsim::RunReport report =
          shardsim::evaluate(scenario, shardsim::parse_precision(shardsim::narrow_name(format)));
      CHECK(report.pass);
    }
  }
}
