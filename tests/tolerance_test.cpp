// The tolerance of non-exact boundaries (compare.hpp): relative to the larger of the oracle's
// max |d| and the magnitude of the Partial addends a value was summed from, so that rounding
// noise in a reduction of cancelling terms is judged at the scale it was rounded at.
#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>

#include "compare/compare.hpp"
#include "core/io.hpp"
#include "scenario/scenario.hpp"
#include "compare/compare-inl.hpp"

using namespace shardsim;

namespace {

TraceEntry entry_named(const std::string& tensor, std::vector<std::string> inputs = {}) {
  TraceEntry entry;
  entry.tensor = tensor;
  entry.inputs = std::move(inputs);
  return entry;
}

}  // namespace

TEST_CASE("tolerance: a cancelling Partial sum is judged at its addends' scale", "[tolerance]") {
  // Two addends of magnitude ~1 whose sum is ~1e-12: rank 0 holds 1 + 2^-40, rank 1 holds -1.
  // Summed in rank order the result is exactly 2^-40. An oracle that summed the same terms in
  // another grouping may be off by a few ulps of the addends (2^-52 each), here 2^-51: relative
  // to the result that is 2^-11, far outside 2^-37 (rtol at f64), but relative to the addends'
  // sum of magnitudes (2 + 2^-40) it is 2^-52: noise.
  const Shape shape({{"hidden", 1}});
  DistTensor<double> partial =
      shardsim::make_dist<double>("grad(b)", shape, Placement::partial(), 2);
  partial.locals = {Tensor<double>(shape, {1.0 + 0x1p-40}), Tensor<double>(shape, {-1.0})};
  const Tensor<double> oracle(shape, {0x1p-40 + 0x1p-51});
  const double rtol = 0x1p-37;
  Comparator<double> compare(Magnitude::of(rtol));
  compare.on_boundary(entry_named("grad(b)"), &oracle, partial);
  CHECK(compare.results().back().status == Status::within);

  // The all-reduced value names the Partial tensor as its input: same scale.
  DistTensor<double> reduced =
      shardsim::make_dist<double>("grad(b)", shape, Placement::replicate(), 2);
  reduced.locals.assign(2, Tensor<double>(shape, {0x1p-40}));
  compare.on_boundary(entry_named("grad(b)", {"grad(b)"}), &oracle, reduced);
  CHECK(compare.results().back().status == Status::within);

  // A gap of 2^-30 is 2^7 times the allowed 2^-37 * (2 + 2^-40): a bug, still caught.
  const Tensor<double> wrong(shape, {0x1p-40 + 0x1p-30});
  compare.on_boundary(entry_named("grad(b)", {"grad(b)"}), &wrong, reduced);
  CHECK(compare.results().back().status == Status::fail);

  // Without a Partial input the scale is the result's own: the same 2^-51 gap fails.
  Comparator<double> plain(Magnitude::of(rtol));
  plain.on_boundary(entry_named("grad(c)"), &oracle, reduced);
  CHECK(plain.results().back().status == Status::fail);
}

TEST_CASE("tolerance: a correct program trains 20000 steps without a false divergence",
          "[tolerance][slow]") {
  // The bundled LayerNorm + masked MSE scenario (Shard(seq) over 4 ranks), 20000 SGD steps at
  // f64. Near convergence the replicated parameters' gradients are ~1e-8 sums of per-rank
  // addends that cancel; with a tolerance relative to the result alone, step ~120 fails.
  std::string text = read_file(std::string(SHARDSIM_SOURCE_DIR) +
                               "/scenarios/layernorm_train_sequence_sharded.toml");
  const std::string from = "train_steps = 2\n";
  REQUIRE(text.find(from) != std::string::npos);
  text.replace(text.find(from), from.size(), "train_steps = 20000\n");
  const Scenario scenario = parse_scenario(text, "long.toml");
  const RunReport report = evaluate(scenario, parse_precision("f64"));
  INFO((report.first_divergence ? report.first_divergence->tensor : std::string("none")));
  CHECK(report.pass);
  // The run trains: the loss falls (to a plateau: LayerNorm's weight and bias alone cannot fit
  // a random target, so not to zero).
  double first_loss = -1;
  double last_loss = -1;
  for (const BoundaryResult& b : report.boundaries) {
    if (b.entry.tensor != "loss" || b.entry.op != "mse_loss") continue;
    if (first_loss < 0) first_loss = b.scale.to_double();
    last_loss = b.scale.to_double();
  }
  CHECK(last_loss < first_loss / 2);
}
