// Plans on N-D meshes and streamed caches, checked against what docs/ promises for them.
// Each case was found by replaying scenarios that are not in the repository (2026-12-04):
//   - a hidden-sharded LayerNorm/RMSNorm whose rows another mesh dim also shards (batch on dp)
//     sized its statistics loops by the global row count and wrote past each rank's rows (heap
//     corruption: free(): invalid next size, or a segfault);
//   - the same plan claimed grad(bias) bitwise exact while its dp shares are Partial (their sum
//     in the comparison is a reordered sum of rows);
//   - dropout's repetition check compared ranks that hold the same elements (Replicate on tp)
//     and called their equal words a seed repetition;
//   - the sequence-sharded ulysses backward claimed exactness without naming the cache among its
//     inputs, so a cache that legitimately carried the previous step's rounding failed it;
//   - two fault models that were two bugs or half of one: fsdp_full_param_step also skipped
//     clipping, average_of_rank_means on a Replicate loss input moved only the backward.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "compare/compare.hpp"
#include "core/scalar.hpp"
#include "scenario/scenario.hpp"

namespace {

using shardsim::RunReport;

RunReport run_at(const std::string& text, const char* precision) {
  const shardsim::Scenario s = shardsim::parse_scenario(text, "mesh_regressions.toml");
  return shardsim::evaluate(s, shardsim::parse_precision(precision));
}

// LayerNorm (or RMSNorm) with x [4, 3, 6] Shard(batch) on dp and Shard(hidden) on tp, a dp x tp
// = 2 x 2 mesh, then the rows moved to Shard(seq) on tp and an MSE loss; one SGD step, in
// `micro_batches` micro-batches when more than one.
std::string hidden_norm_text(const std::string& norm_keys, int micro_batches) {
  std::string text =
      "name = \"hidden_norm_dp_tp\"\nseed = 11\nprecisions = [\"f64\"]\ntrain_steps = 1\n"
      "learning_rate = 0.1\n";
  if (micro_batches > 1) text += "micro_batches = " + std::to_string(micro_batches) + "\n";
  text +=
      "[mesh]\ndims = { dp = 2, tp = 2 }\n"
      "[[tensors]]\nname = \"x\"\naxes = [\"batch\", \"seq\", \"hidden\"]\nshape = [4, 3, 6]\n"
      "init = { dist = \"normal\", mean = 0.5, std = 2.0 }\n"
      "placement = { dp = \"Shard(batch)\", tp = \"Shard(hidden)\" }\n"
      "[[tensors]]\nname = \"target\"\nrole = \"target\"\naxes = [\"batch\", \"seq\", \"hidden\"]\n"
      "shape = [4, 3, 6]\nplacement = { dp = \"Shard(batch)\", tp = \"Shard(seq)\" }\n"
      "[[tensors]]\nname = \"w\"\nrole = \"parameter\"\naxes = [\"hidden\"]\nshape = [6]\n"
      "init = { dist = \"uniform\", low = 0.5, high = 1.5 }\n"
      "placement = { tp = \"Shard(hidden)\" }\n";
  if (norm_keys.find("layer_norm") != std::string::npos) {
    text +=
        "[[tensors]]\nname = \"b\"\nrole = \"parameter\"\naxes = [\"hidden\"]\nshape = [6]\n"
        "init = { dist = \"uniform\", low = -0.25, high = 0.25 }\n"
        "placement = { tp = \"Shard(hidden)\" }\n";
  }
  text += "[[steps]]\n" + norm_keys +
          "mesh_dim = \"tp\"\ninput = \"x\"\nweight = \"w\"\noutput = \"y\"\n"
          "[[steps]]\nop = \"redistribute\"\nmesh_dim = \"tp\"\ninput = \"y\"\noutput = \"yt\"\n"
          "to = \"Shard(seq)\"\n"
          "[[steps]]\nop = \"mse_loss\"\nmesh_dim = \"tp\"\ninput = \"yt\"\ntarget = \"target\"\n"
          "output = \"loss\"\n[expect]\nverdict = \"pass\"\n";
  return text;
}

}  // namespace

TEST_CASE("a hidden-sharded norm on dp x tp normalizes each dp rank's own rows",
          "[mesh][layer_norm][hidden]") {
  // Every rank holds 2 of the 4 batch rows (dp) and 3 of the 6 features (tp). The statistics
  // are per row: 2 * 3 = 6 rows on a rank, not the 12 of the global tensor. With the global count
  // the loops ran past every local tensor (rows 0-5 were right; rows 6-11 were reads and writes
  // out of bounds). The evidence is that overrun: AddressSanitizer names it (tools/test
  // --sanitize runs this test), and a Release build usually aborted in free(), though it can
  // pass by luck there. The oracle comparison checks the rows' values.
  for (const char* keys :
       {"op = \"layer_norm\"\nbias = \"b\"\nstats = \"sum_sumsq\"\n",
        "op = \"layer_norm\"\nbias = \"b\"\nstats = \"welford\"\n", "op = \"rms_norm\"\n"}) {
    INFO(keys);
    const RunReport report = run_at(hidden_norm_text(keys, 1), "f64");
    CHECK(report.pass);
    CHECK_FALSE(report.first_divergence);
  }
}

TEST_CASE("hidden-sharded grad(bias) claims no exactness when another dim holds Partial shares",
          "[mesh][layer_norm][hidden]") {
  // With dp also sharding the rows, grad(ln.bias) is Partial on dp: each dp rank sums its own
  // rows, and the comparison adds the shares, (r0 + r1) + (r2 + r3) where the oracle adds
  // ((r0 + r1) + r2) + r3: a reordered sum, within tolerance but not bitwise. This replay
  // (dp 2 x tp 3, hidden 7 padded over tp, two micro-batches) found it: in micro-batch 2 every
  // input of the boundary matched bitwise, so the claim stood, and grad(ln.bias) at hidden 5 came
  // out 1 ulp off the oracle (1.7604632119252512 against ...515), failing a clean run.
  const std::string text =
      "name = \"hidden_norm_micro\"\nseed = 7\nprecisions = [\"f64\"]\ntrain_steps = 2\n"
      "learning_rate = 0.1\nmicro_batches = 2\n"
      "[mesh]\ndims = { dp = 2, tp = 3 }\nreduce_order = \"ring\"\n"
      "[[tensors]]\nname = \"x\"\naxes = [\"batch\", \"seq\", \"hidden\"]\nshape = [4, 5, 7]\n"
      "init = { dist = \"normal\", mean = 0.5, std = 2.0 }\n"
      "placement = { dp = \"Shard(batch)\", tp = \"Shard(hidden, padded)\" }\n"
      "[[tensors]]\nname = \"target\"\nrole = \"target\"\naxes = [\"batch\", \"seq\", \"hidden\"]\n"
      "shape = [4, 5, 7]\ninit = { dist = \"uniform\", low = -1.0, high = 1.0 }\n"
      "placement = { dp = \"Shard(batch)\", tp = \"Shard(seq)\" }\n"
      "[[tensors]]\nname = \"ln.weight\"\nrole = \"parameter\"\naxes = [\"hidden\"]\nshape = [7]\n"
      "init = { dist = \"uniform\", low = 0.5, high = 1.5 }\n"
      "placement = { tp = \"Shard(hidden, padded)\" }\n"
      "[[tensors]]\nname = \"ln.bias\"\nrole = \"parameter\"\naxes = [\"hidden\"]\nshape = [7]\n"
      "init = { dist = \"uniform\", low = -0.25, high = 0.25 }\n"
      "placement = { tp = \"Shard(hidden, padded)\" }\n"
      "[[steps]]\nop = \"layer_norm\"\ninput = \"x\"\noutput = \"y\"\nweight = \"ln.weight\"\n"
      "mesh_dim = \"tp\"\nbias = \"ln.bias\"\nstats = \"sum_sumsq\"\n"
      "[[steps]]\nop = \"redistribute\"\ninput = \"y\"\noutput = \"yt\"\nto = \"Shard(seq)\"\n"
      "mesh_dim = \"tp\"\n"
      "[[steps]]\nop = \"mse_loss\"\ninput = \"yt\"\ntarget = \"target\"\noutput = \"loss\"\n"
      "mesh_dim = \"tp\"\nvalid_lengths = [5, 1, 3, 2]\n";
  const RunReport report = run_at(text, "f64");
  CHECK(report.pass);
  CHECK_FALSE(report.first_divergence);
  int bias_grads = 0;
  for (const auto& b : report.boundaries) {
    if (b.entry.tensor != "grad(ln.bias)" || b.entry.op != "layer_norm_backward") continue;
    ++bias_grads;
    CHECK(b.entry.layout.has_partial());
    CHECK_FALSE(b.entry.exact);
  }
  CHECK(bias_grads == 4);  // two training steps of two micro-batches
}

TEST_CASE("dropout's repetition check compares only ranks that hold different elements",
          "[mesh][dropout]") {
  // dp x tp = 2 x 2, x Shard(batch) on dp and Replicate on tp: ranks 0 and 1 (dp 0; tp is the
  // inner dim, rank = 2 dp + tp) hold batch row 0, ranks 2 and 3 row 1. Replicas must draw the
  // same words (docs/ops/mlp.md "Dropout randomness"), so the clean run has nothing to flag.
  const std::string base =
      "name = \"dropout_dp_tp\"\nseed = 7\nprecisions = [\"f64\"]\n"
      "[mesh]\ndims = { dp = 2, tp = 2 }\n"
      "[[tensors]]\nname = \"x\"\naxes = [\"batch\", \"seq\", \"hidden\"]\nshape = [2, 3, 4]\n"
      "placement = { dp = \"Shard(batch)\" }\n"
      "[[steps]]\nop = \"dropout\"\nmesh_dim = \"tp\"\ninput = \"x\"\noutput = \"d\"\np = 0.5\n";
  const RunReport clean = run_at(base, "f64");
  CHECK(clean.pass);
  CHECK_FALSE(clean.first_divergence);

  // Every rank seeded alike: the two holders (ranks 0 and 2) draw one stream, so the verdict
  // flags (rank 0, peer 2), and only that pair (the replicas 1 and 3 are not holders).
  std::string faulty = base;
  faulty.insert(faulty.find("[mesh]"), "faults = [\"dropout_same_seed\"]\n");
  const RunReport same_seed = run_at(faulty, "f64");
  REQUIRE(same_seed.first_divergence);
  CHECK(same_seed.first_divergence->tensor == "d.mask@repetition");
  for (const auto& b : same_seed.boundaries) {
    if (b.entry.tensor != "d.mask@repetition") continue;
    REQUIRE(b.first_bad);
    CHECK(b.first_bad->rank == 0);
    using Index = std::vector<std::pair<std::string, std::int64_t>>;
    CHECK(b.first_bad->index == Index{{"rank", 0}, {"peer", 2}});
  }
}

TEST_CASE("the sequence-sharded ulysses backward names the cache among its inputs",
          "[attention][stream][ulysses]") {
  // Streamed chunks [1, 4, 1], two training steps: from chunk 2 on, the backward reads the cached
  // keys and values (dp = dO . v_j over every key), so its exactness claim holds only while the
  // cache matches. In step 2 the cache carries step 1's rounded updates: off by 1 ulp at f32 in
  // this replay, where q/k/v happen to match bitwise; without the cache among the inputs the
  // claim stood and the run failed at grad(y.q_heads).
  const std::string text =
      "name = \"ulysses_cache\"\nseed = 330\nprecisions = [\"f32\"]\ntrain_steps = 2\n"
      "learning_rate = 0.05\n[mesh]\nranks = 2\n[tolerance]\nf32 = 1e-4\n"
      "[stream]\naxis = \"seq\"\nchunks = [1, 4, 1]\n"
      "[[tensors]]\nname = \"x\"\naxes = [\"batch\", \"seq\", \"hidden\"]\nshape = [2, 6, 6]\n"
      "init = { dist = \"normal\", mean = 0.0, std = 1.0 }\nplacement = \"Shard(seq, zigzag)\"\n"
      "[[tensors]]\nname = \"target\"\nrole = \"target\"\naxes = [\"batch\", \"seq\", \"hidden\"]\n"
      "shape = [2, 6, 6]\nplacement = \"Shard(seq, zigzag)\"\n"
      "[[tensors]]\nname = \"wq\"\nrole = \"parameter\"\naxes = [\"hidden\", \"head\", "
      "\"head_dim\"]\n"
      "shape = [6, 1, 4]\ninit = { dist = \"uniform\", low = -0.5, high = 0.5 }\n"
      "[[tensors]]\nname = \"wk\"\nrole = \"parameter\"\naxes = [\"hidden\", \"head\", "
      "\"head_dim\"]\n"
      "shape = [6, 1, 4]\ninit = { dist = \"uniform\", low = -0.5, high = 0.5 }\n"
      "[[tensors]]\nname = \"wv\"\nrole = \"parameter\"\naxes = [\"hidden\", \"head\", "
      "\"head_dim\"]\n"
      "shape = [6, 1, 4]\ninit = { dist = \"uniform\", low = -0.5, high = 0.5 }\n"
      "[[tensors]]\nname = \"wo\"\nrole = \"parameter\"\naxes = [\"head\", \"head_dim\", "
      "\"hidden\"]\n"
      "shape = [1, 4, 6]\ninit = { dist = \"uniform\", low = -0.5, high = 0.5 }\n"
      "[[steps]]\nop = \"sliding_window_attention\"\ninput = \"x\"\nwq = \"wq\"\nwk = \"wk\"\n"
      "wv = \"wv\"\nwo = \"wo\"\noutput = \"y\"\nn_head = 1\nhead_dim = 4\nwindow = 3\n"
      "rope_theta = 10000.0\nrope = \"rotate_half\"\ncp_mode = \"ulysses\"\n"
      "[[steps]]\nop = \"mse_loss\"\ninput = \"y\"\ntarget = \"target\"\noutput = \"loss\"\n";
  const RunReport report = run_at(text, "f32");
  CHECK(report.pass);
  int checked = 0;
  for (const auto& b : report.boundaries) {
    if (b.entry.op != "attention_backward" || b.entry.chunk < 2) continue;
    ++checked;
    const auto& in = b.entry.inputs;
    CHECK(std::find(in.begin(), in.end(), "y.cache_k") != in.end());
    CHECK(std::find(in.begin(), in.end(), "y.cache_v") != in.end());
  }
  CHECK(checked > 0);
}

TEST_CASE("fsdp_full_param_step clips the own gradient as the correct program does",
          "[fsdp][faults]") {
  // dp = 1: the rank's own gradient is the reduced one, so the fault has nothing to change. It
  // stepped with the gradient from before clip_grad_norm (0.05), and the update diverged at
  // sgd -> ln.weight (0.719 against 0.888): two bugs where the catalogue names one.
  const std::string text =
      "name = \"full_param_step_dp1\"\nseed = 7\nprecisions = [\"f64\"]\ntrain_steps = 1\n"
      "clip_grad_norm = 0.05\nfsdp = { style = \"per_param\", dim = \"dp\" }\n"
      "faults = [\"fsdp_full_param_step\"]\n[mesh]\ndims = { dp = 1 }\n"
      "[[tensors]]\nname = \"x\"\naxes = [\"batch\", \"seq\", \"hidden\"]\nshape = [2, 5, 7]\n"
      "init = { dist = \"normal\", mean = 0.5, std = 2.0 }\nplacement = \"Shard(batch)\"\n"
      "[[tensors]]\nname = \"target\"\nrole = \"target\"\naxes = [\"batch\", \"seq\", \"hidden\"]\n"
      "shape = [2, 5, 7]\nplacement = \"Shard(batch)\"\n"
      "[[tensors]]\nname = \"ln.weight\"\nrole = \"parameter\"\naxes = [\"hidden\"]\nshape = [7]\n"
      "init = { dist = \"uniform\", low = 0.5, high = 1.5 }\n"
      "[[steps]]\nop = \"layer_norm\"\ninput = \"x\"\nweight = \"ln.weight\"\noutput = \"y\"\n"
      "[[steps]]\nop = \"mse_loss\"\ninput = \"y\"\ntarget = \"target\"\noutput = \"loss\"\n";
  const RunReport one_rank = run_at(text, "f64");
  CHECK(one_rank.pass);
  CHECK_FALSE(one_rank.first_divergence);
  // On two dp ranks the fault shows where the catalogue says: the full copies differ.
  std::string two = text;
  two.replace(two.find("dp = 1 }"), 8, "dp = 2 }");
  const RunReport two_ranks = run_at(two, "f64");
  REQUIRE(two_ranks.first_divergence);
  CHECK(two_ranks.first_divergence->tensor == "ln.weight@replicas");
}

TEST_CASE("average_of_rank_means on a Replicate loss input: forward and backward alike",
          "[loss][faults]") {
  // One rank holds every token: its own mean is the call's mean. Without micro-batches that is
  // the correct loss; with two, micro-batch 1's loss is S1 / V1 where the step's is S1 / V,
  // V = 17 valid tokens (valid_lengths 6, 5, 4, 2) and V1 = 11 (rows 0 and 1). The backward
  // already divided by V1; the forward ignored the fault, so the run diverged first at grad(y)
  // (off by 17/11) with loss exact, a forward and a backward of different programs.
  const std::string text =
      "name = \"arm_replicated_micro\"\nseed = 7\nprecisions = [\"f64\"]\ntrain_steps = 1\n"
      "micro_batches = 2\nfaults = [\"average_of_rank_means\"]\n[mesh]\nranks = 1\n"
      "[[tensors]]\nname = \"x\"\naxes = [\"batch\", \"seq\", \"hidden\"]\nshape = [4, 6, 7]\n"
      "init = { dist = \"normal\", mean = 0.5, std = 2.0 }\n"
      "[[tensors]]\nname = \"target\"\nrole = \"target\"\naxes = [\"batch\", \"seq\", \"hidden\"]\n"
      "shape = [4, 6, 7]\n"
      "[[tensors]]\nname = \"ln.weight\"\nrole = \"parameter\"\naxes = [\"hidden\"]\nshape = [7]\n"
      "init = { dist = \"uniform\", low = 0.5, high = 1.5 }\n"
      "[[steps]]\nop = \"layer_norm\"\ninput = \"x\"\nweight = \"ln.weight\"\noutput = \"y\"\n"
      "[[steps]]\nop = \"mse_loss\"\ninput = \"y\"\ntarget = \"target\"\noutput = \"loss\"\n"
      "valid_lengths = [6, 5, 4, 2]\n";
  const RunReport report = run_at(text, "f64");
  REQUIRE(report.first_divergence);
  CHECK(report.first_divergence->tensor == "loss");
  CHECK(report.first_divergence->micro == 1);
  // The ratio of the two losses is V / V1 = 17 / 11.
  CHECK(report.first_divergence->sharded / report.first_divergence->dense ==
        Approx(17.0 / 11.0).epsilon(1e-12));
}
