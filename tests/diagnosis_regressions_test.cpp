// Diagnoses of attention faults in layouts the bundled scenarios do not cover, found by replaying
// scenarios that are not in the repository (2026-12-04). Each fault was caught at the right
// boundary, but the cause named was wrong or missing:
//   - window_off_by_one first showing in chunk 2 with sequence-sharded ulysses: window_mask
//     found no keys (ulysses keeps the cache apart from the chunk's keys: NAME.cache_k and
//     NAME.k_new, no NAME.k_all), and chunk_onset named the cache, weakly, though the cache
//     matched;
//   - ring_merge_average on a balanced (tensor_split) split: ring_merge counted KV blocks as
//     torch.chunk cuts them, so rows that merged two blocks looked like one-block rows.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "compare/compare.hpp"
#include "diagnosis/diagnosis.hpp"
#include "core/scalar.hpp"
#include "scenario/scenario.hpp"

namespace {

using shardsim::Cause;

// One attention step (x [1, SEQ, 4], heads x 2, window 2) and an MSE loss, forward only.
std::string attention_text(const std::string& head, int seq, int heads, const std::string& mode,
                           const std::string& placement) {
  const std::string s = std::to_string(seq), n = std::to_string(heads);
  std::string text = head + "[[tensors]]\nname = \"x\"\naxes = [\"batch\", \"seq\", \"hidden\"]\n" +
                     "shape = [1, " + s + ", 4]\n" +
                     "init = { dist = \"normal\", mean = 0.0, std = 1.0 }\nplacement = \"" +
                     placement + "\"\n" + "[[tensors]]\nname = \"target\"\nrole = \"target\"\n" +
                     "axes = [\"batch\", \"seq\", \"hidden\"]\nshape = [1, " + s + ", 4]\n" +
                     "placement = \"" + placement + "\"\n";
  for (const char* w : {"wq", "wk", "wv"}) {
    text += std::string("[[tensors]]\nname = \"") + w + "\"\nrole = \"parameter\"\n" +
            "axes = [\"hidden\", \"head\", \"head_dim\"]\nshape = [4, " + n + ", 2]\n" +
            "init = { dist = \"uniform\", low = -0.5, high = 0.5 }\n";
  }
  text +=
      "[[tensors]]\nname = \"wo\"\nrole = \"parameter\"\n"
      "axes = [\"head\", \"head_dim\", \"hidden\"]\nshape = [" +
      n +
      ", 2, 4]\n"
      "init = { dist = \"uniform\", low = -0.5, high = 0.5 }\n"
      "[[steps]]\nop = \"sliding_window_attention\"\ninput = \"x\"\nwq = \"wq\"\n"
      "wk = \"wk\"\nwv = \"wv\"\nwo = \"wo\"\noutput = \"y\"\nn_head = " +
      n +
      "\nhead_dim = 2\nwindow = 2\nrope_theta = 10000.0\nrope = \"rotate_half\"\n"
      "cp_mode = \"" +
      mode +
      "\"\n"
      "[[steps]]\nop = \"mse_loss\"\ninput = \"y\"\ntarget = \"target\"\noutput = \"loss\"\n";
  return text;
}

shardsim::Diagnosis diagnosed(const std::string& text) {
  const shardsim::Scenario s = shardsim::parse_scenario(text, "diagnosis_regressions.toml");
  const std::vector<shardsim::RunReport> reports{
      shardsim::evaluate(s, shardsim::parse_precision("f64"))};
  REQUIRE(reports.front().first_divergence);
  return shardsim::diagnose(s, reports);
}

}  // namespace

TEST_CASE("diagnosis: a window bound off by one under sequence-sharded ulysses, from chunk 2",
          "[diagnosis][attention]") {
  // Chunks of 2 then 4 tokens, window 2: chunk 1's two queries see keys at distance 0 and 1
  // only, so the bound (distance 2 admitted) first acts in chunk 2, at y.lse. The keys of chunk
  // 2 are the cache (chunk 1's last key: window - 1 = 1, y.cache_k) and the chunk's 4 (y.k_new).
  const std::string head =
      "name = \"ulysses_window\"\nseed = 5\nprecisions = [\"f64\"]\n"
      "faults = [\"window_off_by_one\"]\n[mesh]\nranks = 2\n"
      "[stream]\naxis = \"seq\"\nchunks = [2, 4]\n";
  const shardsim::Diagnosis d = diagnosed(attention_text(head, 6, 2, "ulysses", "Shard(seq)"));
  REQUIRE(d.analysed);
  CHECK(d.where.find("chunk 2") != std::string::npos);
  CHECK(d.where.find("y.lse") != std::string::npos);
  REQUIRE_FALSE(d.causes.empty());
  CHECK(d.causes.front().signature == "window_mask");
  CHECK(d.causes.front().cause == Cause::position_offset);
  CHECK(d.causes.front().evidence.find("the window bound off by one") != std::string::npos);
  for (const shardsim::Finding& f : d.causes) CHECK(f.cause != Cause::cache_convention);
}

TEST_CASE("diagnosis: a ring merge that averages, on a balanced split", "[diagnosis][attention]") {
  // 5 tokens over 4 ranks as tensor_split cuts them: 2, 1, 1, 1 (torch.chunk would give 2, 2,
  // 1, 0). Window 2: query q attends keys q - 1 and q, so queries 2, 3 and 4 merge two blocks
  // (keys 1|2, 2|3, 3|4) and queries 0 and 1 one (block 0 holds keys 0 and 1). The fault
  // averages the blocks' results instead of merging them by their log-sum-exp: only the merged
  // rows are off, which is ring_merge's signature of softmax_merge.
  const std::string head =
      "name = \"ring_balanced\"\nseed = 11\nprecisions = [\"f64\"]\n"
      "faults = [\"ring_merge_average\"]\n[mesh]\nranks = 4\n";
  const shardsim::Diagnosis d =
      diagnosed(attention_text(head, 5, 1, "ring", "Shard(seq, balanced)"));
  REQUIRE(d.analysed);
  REQUIRE_FALSE(d.causes.empty());
  CHECK(d.causes.front().signature == "ring_merge");
  CHECK(d.causes.front().cause == Cause::softmax_merge);
  CHECK(d.causes.front().evidence.find("rows spanning one KV block: 0 of") != std::string::npos);
}
