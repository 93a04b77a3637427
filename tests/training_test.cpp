// End-to-end training through the normalization ops: train_steps = K runs forward, backward, the
// all-reduce of Partial parameter gradients (its own boundary), SGD and the replica check K
// times, comparing everything with the dense model at every step. Uses the bundled scenarios
// (uneven chunk/balanced/padded token splits, hidden-sharded LayerNorm, RMSNorm).
#include <catch2/catch.hpp>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "compare/compare.hpp"
#include "runner/runner.hpp"
#include "scenario/scenario.hpp"
#include "runner/release.hpp"
#include "tensor_test_support.hpp"

using shardsim::BoundaryResult;
using shardsim::DistTensor;
using shardsim::Status;
using shardsim::Tensor;
using shardsim::TraceEntry;

namespace {

shardsim::Scenario scenario(const std::string& name) {
  return shardsim::load_scenario(std::string(SHARDSIM_SOURCE_DIR) + "/scenarios/" + name);
}

const BoundaryResult* find(const std::vector<BoundaryResult>& boundaries, int step,
                           const std::string& op, const std::string& tensor) {
  for (const BoundaryResult& b : boundaries) {
    if (b.entry.step == step && b.entry.op == op && b.entry.tensor == tensor) return &b;
  }
  return nullptr;
}

// A sink that keeps selected boundaries' values; a boundary "matches" when every compared
// element is bitwise the oracle's (a Partial tensor summed in rank order first).
class Recorder final : public shardsim::BoundarySink<double> {
 public:
  struct Seen {
    TraceEntry entry;
    Tensor<double> dense;
    DistTensor<double> sharded;
  };
  bool on_boundary(const TraceEntry& entry, const Tensor<double>* dense,
                   const DistTensor<double>& sharded) override {
    seen.push_back({entry, dense ? *dense : Tensor<double>(), sharded});
    if (!dense) return false;
    if (sharded.layout.on(0).is_partial()) {
      const Tensor<double> sum = tensor_test::partial_sum(sharded);
      for (std::int64_t e = 0; e < sum.numel(); ++e) {
        if (!shardsim::ScalarTraits<double>::identical(sum[e], (*dense)[e])) return false;
      }
      return true;
    }
    return tensor_test::matches_bitwise(sharded, *dense);
  }
  std::vector<const Seen*> all(const std::string& op, const std::string& tensor) const {
    std::vector<const Seen*> out;
    for (const Seen& s : seen) {
      if (s.entry.op == op && s.entry.tensor == tensor) out.push_back(&s);
    }
    return out;
  }
  std::vector<Seen> seen;
};

}  // namespace

TEST_CASE("training scenarios pass and trace every step's loss, reduction, update and check",
          "[training]") {
  struct Case {
    const char* file;
    std::vector<std::string> replicated;  // parameters whose Partial grads are all-reduced
    std::vector<std::string> sharded;     // Shard(hidden) parameters: no replica check
  };
  const Case cases[] = {
      {"norm_train_chunk.toml", {"ln.weight", "ln.bias"}, {}},
      {"norm_train_balanced.toml", {"ln.weight", "ln.bias"}, {}},
      {"norm_train_padded.toml", {"ln.weight", "ln.bias"}, {}},
      {"norm_rms_sequence.toml", {"rms.weight"}, {}},
      {"norm_hidden_sum_sumsq.toml", {}, {"ln.weight", "ln.bias"}},
      {"norm_hidden_welford.toml", {}, {"ln.weight", "ln.bias"}},
      {"norm_hidden_redistribute.toml", {}, {"ln.weight", "ln.bias"}},
      {"norm_rms_hidden.toml", {}, {"rms.weight"}},
  };
  for (const Case& c : cases) {
    INFO(c.file);
    const shardsim::Scenario s = scenario(c.file);
    REQUIRE(s.train_steps >= 2);
    const shardsim::RunReport report = shardsim::evaluate(s, shardsim::parse_precision("f64"));
    CHECK(report.pass);
    for (int step = 1; step <= s.train_steps; ++step) {
      INFO("step " << step);
      CHECK(find(report.boundaries, step, "mse_loss", "loss") != nullptr);
      for (const std::string& p : c.replicated) {
        // The Partial gradient is all-reduced as its own boundary, then SGD, then the check.
        const BoundaryResult* reduce =
            find(report.boundaries, step, "all_reduce", "grad(" + p + ")");
        const BoundaryResult* update = find(report.boundaries, step, "sgd", p);
        const BoundaryResult* check =
            find(report.boundaries, step, "replica_check", p + "@replicas");
        REQUIRE(reduce != nullptr);
        REQUIRE(update != nullptr);
        REQUIRE(check != nullptr);
        CHECK(reduce->entry.kind == shardsim::BoundaryKind::collective);
        CHECK(reduce->entry.id < update->entry.id);
        CHECK(check->status == Status::exact);  // replicas bitwise identical
      }
      for (const std::string& p : c.sharded) {
        const BoundaryResult* update = find(report.boundaries, step, "sgd", p);
        REQUIRE(update != nullptr);
        CHECK(update->entry.layout.on(0).is_shard());
        CHECK(find(report.boundaries, step, "replica_check", p + "@replicas") == nullptr);
      }
    }
  }
}

TEST_CASE("sequence-sharded training is bitwise where the arithmetic is the dense one",
          "[training]") {
  // Step 1 starts from identical inputs, so y, its statistics and grad(x) are the dense
  // arithmetic row by row at every precision. Later steps use parameters updated from
  // all-reduced (reordered) gradients, so their claims are dropped, not failed.
  for (const char* file :
       {"norm_train_chunk.toml", "norm_train_balanced.toml", "norm_train_padded.toml"}) {
    for (const char* level : {"f32", "f64", "mp256"}) {
      INFO(file << " at " << level);
      const shardsim::RunReport report =
          shardsim::evaluate(scenario(file), shardsim::parse_precision(level));
      CHECK(report.pass);
      for (const char* tensor : {"y.mean", "y.rstd", "y"}) {
        const BoundaryResult* b = find(report.boundaries, 1, "layer_norm", tensor);
        REQUIRE(b != nullptr);
        CHECK(b->status == Status::exact);
      }
      const BoundaryResult* dx = find(report.boundaries, 1, "layer_norm_backward", "grad(x)");
      REQUIRE(dx != nullptr);
      CHECK(dx->status == Status::exact);
      // The valid-token count is all-reduced exactly: 22, 17 and 18 tokens.
      const BoundaryResult* count = find(report.boundaries, 1, "all_reduce", "loss.valid_tokens");
      REQUIRE(count != nullptr);
      CHECK(count->status == Status::exact);
    }
  }
}

TEST_CASE("SGD moves the replicated parameters identically on every rank, and the loss falls",
          "[training]") {
  const shardsim::Scenario s = scenario("norm_train_padded.toml");
  Recorder recorder;
  shardsim::run_scenario<double>(s, {}, recorder);
  const auto updates = recorder.all("sgd", "ln.weight");
  REQUIRE(updates.size() == 3);
  for (std::size_t k = 0; k < updates.size(); ++k) {
    INFO("step " << k + 1);
    const DistTensor<double>& param = updates[k]->sharded;
    for (int r = 1; r < param.ranks(); ++r) {
      for (std::int64_t i = 0; i < 16; ++i) CHECK(param.local(r)[i] == param.local(0)[i]);
    }
    // Against the oracle: the all-reduced gradient sums 18 valid tokens' terms in another
    // order; the parameters agree to a few ulps of the update (lr * grad ~ 0.1), far inside
    // the f64 tolerance 2^-37.
    CHECK(tensor_test::normwise_error(param, updates[k]->dense) < 0x1p-40);
    if (k > 0) {
      bool moved = false;
      for (std::int64_t i = 0; i < 16; ++i) {
        moved = moved || updates[k]->dense[i] != updates[k - 1]->dense[i];
      }
      CHECK(moved);
    }
  }
  const auto losses = recorder.all("mse_loss", "loss");
  REQUIRE(losses.size() == 3);
  CHECK(losses[1]->dense[0] < losses[0]->dense[0]);
  CHECK(losses[2]->dense[0] < losses[1]->dense[0]);
  // Padding rows (rank 3 holds seq[12:13)+3pad) are zero in every sharded gradient of x.
  for (const auto* grad : recorder.all("layer_norm_backward", "grad(x)")) {
    const Tensor<double>& local = grad->sharded.local(3);
    const auto view = shardsim::AxisView::of(local.shape(), "seq");
    for (std::int64_t o = 0; o < view.outer; ++o) {
      for (std::int64_t i = 1; i < view.extent; ++i) {
        for (std::int64_t j = 0; j < view.inner; ++j) CHECK(local[view.flat(o, i, j)] == 0.0);
      }
    }
  }
}

TEST_CASE("hidden-sharded training agrees with the dense model to ~2^-(bits-16) at mp256",
          "[training][hidden][mp]") {
  for (const char* file :
       {"norm_hidden_sum_sumsq.toml", "norm_hidden_welford.toml", "norm_rms_hidden.toml"}) {
    INFO(file);
    const shardsim::RunReport report =
        shardsim::evaluate(scenario(file), shardsim::parse_precision("mp256"));
    CHECK(report.pass);
    double worst = 0;
    for (const BoundaryResult& b : report.boundaries) {
      if (b.status == Status::within)
        worst = std::max(worst, (b.max_abs / b.scale).to_double());
    }
    CHECK(worst > 0);          // the statistics really are reordered (not exact)
    CHECK(worst <= 0x1p-241);  // 2^(16 - 257): invariant 5 (docs/architecture.md)
  }
}

TEST_CASE("distributed statistics do not depend on the rank schedule", "[training][hidden]") {
  // Every local phase touches only its own rank, and every cross-rank sum or merge has a fixed
  // order (the world's reduce order; Welford merges in rank order), so visiting the ranks in
  // another order changes nothing: the same statuses and the same metrics, bit for bit.
  for (const char* file : {"norm_hidden_sum_sumsq.toml", "norm_hidden_welford.toml",
                           "norm_hidden_redistribute.toml", "norm_rms_hidden.toml"}) {
    INFO(file);
    const shardsim::Scenario s = scenario(file);
    const shardsim::Precision f32 = shardsim::parse_precision("f32");
    const shardsim::RunReport reference = shardsim::evaluate(s, f32);
    for (const char* schedule : {"reverse", "shuffle:99"}) {
      INFO(schedule);
      shardsim::RunOptions options;
      options.schedule = shardsim::parse_schedule(schedule);
      const shardsim::RunReport other = shardsim::evaluate(s, f32, options);
      REQUIRE(other.boundaries.size() == reference.boundaries.size());
      for (std::size_t i = 0; i < other.boundaries.size(); ++i) {
        CHECK(other.boundaries[i].entry.tensor == reference.boundaries[i].entry.tensor);
        CHECK(other.boundaries[i].status == reference.boundaries[i].status);
        CHECK(other.boundaries[i].max_abs == reference.boundaries[i].max_abs);
        CHECK(other.boundaries[i].max_ulp == reference.boundaries[i].max_ulp);
      }
    }
  }
}

TEST_CASE("during backward the runner releases exactly what no remaining step reads",
          "[training][memory]") {
  // layernorm_train_sequence_sharded: step 0 layer_norm(x, ln.weight, ln.bias) -> y, step 1
  // mse_loss(y, target) -> loss. Pinned: the declared tensors and the parameters' gradients.
  const shardsim::Scenario sc = scenario("layernorm_train_sequence_sharded.toml");
  REQUIRE(sc.steps.size() == 2);
  const std::set<std::string> pinned{"x",       "target",          "ln.weight",
                                     "ln.bias", "grad(ln.weight)", "grad(ln.bias)"};
  // After the loss's backward, only layer_norm remains; its backward reads x, its saved
  // statistics and grad(y), not y (LayerNormStep::backward_reads_output() is false).
  const shardsim::LiveNames after_loss = shardsim::live_names(sc.steps, {false}, pinned);
  for (const char* gone :
       {"y", "y.mean", "y.rstd", "loss", "loss.sum", "loss.valid_tokens", "grad(loss)"}) {
    INFO(gone);
    CHECK_FALSE(after_loss.keeps(gone));
  }
  for (const char* kept : {"x", "target", "ln.weight", "grad(y)", "grad(y).sum_dnorm", "grad(x)",
                           "grad(x)@y", "grad(ln.bias)"}) {
    INFO(kept);
    CHECK(after_loss.keeps(kept));
  }
  // A step whose backward reads its output keeps it and what derives from it.
  const shardsim::LiveNames reads = shardsim::live_names(sc.steps, {true}, pinned);
  CHECK(reads.keeps("y"));
  CHECK(reads.keeps("y.rstd"));
  CHECK_FALSE(reads.keeps("yy"));  // a different name that merely starts with "y"
  // After the last backward only the pinned entries remain.
  const shardsim::LiveNames none = shardsim::live_names(sc.steps, {}, pinned);
  CHECK_FALSE(none.keeps("grad(x)"));
  CHECK_FALSE(none.keeps("grad(y)"));
  CHECK(none.keeps("grad(ln.bias)"));
  CHECK(none.keeps("x"));
}

TEST_CASE("a forward-only run releases each entry once no later step names it",
          "[training][memory]") {
  // mlp_sequence_parallel's steps: 0 layer_norm(x) -> ln, 1 redistribute(ln) -> ln.full,
  // 2 linear(ln.full, fc1.*) -> h, 3 gelu(h) -> a, 4 linear(a, fc2.*) -> o, 5 redistribute(o)
  // -> o.seq, 6 dropout(o.seq) -> d, 7 add(d, x) -> ... . The rule is read off the spec: after
  // step i ran forward, an entry stays if it is pinned or derives from a name of steps i+1...
  const shardsim::Scenario sc = scenario("mlp_sequence_parallel.toml");
  REQUIRE(sc.steps.size() >= 8);
  const std::set<std::string> pinned{"x", "ln.weight", "ln.bias"};
  // After layer_norm: the redistribute still reads ln (and ln's statistics derive from it).
  const shardsim::LiveNames after_norm = shardsim::forward_live_names(sc.steps, 1, pinned);
  CHECK(after_norm.keeps("ln"));
  CHECK(after_norm.keeps("ln.rstd"));
  CHECK(after_norm.keeps("x"));
  // After the redistribute: ln is read by no later step, so it and its statistics go; the
  // gathered ln.full stays for the column-parallel linear.
  const shardsim::LiveNames after_gather = shardsim::forward_live_names(sc.steps, 2, pinned);
  CHECK_FALSE(after_gather.keeps("ln"));
  CHECK_FALSE(after_gather.keeps("ln.mean"));
  CHECK(after_gather.keeps("ln.full"));
  CHECK(after_gather.keeps("ln.weight"));  // pinned
  // After gelu: h is gone, a stays for the row-parallel linear.
  const shardsim::LiveNames after_gelu = shardsim::forward_live_names(sc.steps, 4, pinned);
  CHECK_FALSE(after_gelu.keeps("h"));
  CHECK_FALSE(after_gelu.keeps("ln.full"));
  CHECK(after_gelu.keeps("a"));
  // No gradient is ever live in a forward-only run, and after the last step only pinned ones.
  CHECK_FALSE(after_gelu.keeps("grad(a)"));
  const shardsim::LiveNames done = shardsim::forward_live_names(sc.steps, sc.steps.size(), pinned);
  CHECK_FALSE(done.keeps("a"));
  CHECK(done.keeps("x"));
}
