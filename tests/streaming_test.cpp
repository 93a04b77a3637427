// Tests for streaming: the [stream] table (located validation errors), the runner's chunk loop
// (chunk numbers on boundaries, per-chunk input slices and layouts, the KV cache reset every
// training step, per-chunk updates), the attention step's located errors and plan warning, and
// the cache_raw_k fault surfacing at chunk 2. The streamed oracle itself (cache convention,
// detached-cache gradient) is tested in attention_stream_test.cpp.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "compare/compare.hpp"
#include "core/error.hpp"
#include "scenario/scenario.hpp"

namespace fs = std::filesystem;

namespace {

// Streamed attention + loss, 2 ranks, 2 training steps.
const std::string kStream = R"toml(name = "stream"
precisions = ["f64"]
train_steps = 2

[mesh]
ranks = 2

[stream]
axis = "seq"
chunks = [5, 3, 6]

[[tensors]]
name = "x"
axes = ["batch", "seq", "hidden"]
shape = [1, 14, 4]

[[tensors]]
name = "target"
role = "target"
axes = ["batch", "seq", "hidden"]
shape = [1, 14, 4]

[[tensors]]
name = "wq"
role = "parameter"
axes = ["hidden", "head", "head_dim"]
shape = [4, 2, 2]

[[tensors]]
name = "wk"
role = "parameter"
axes = ["hidden", "head", "head_dim"]
shape = [4, 2, 2]

[[tensors]]
name = "wv"
role = "parameter"
axes = ["hidden", "head", "head_dim"]
shape = [4, 2, 2]

[[tensors]]
name = "wo"
role = "parameter"
axes = ["head", "head_dim", "hidden"]
shape = [2, 2, 4]

[[steps]]
op = "sliding_window_attention"
input = "x"
wq = "wq"
wk = "wk"
wv = "wv"
wo = "wo"
output = "y"
n_head = 2
head_dim = 2
window = 4
cp_mode = "allgather"

[[steps]]
op = "mse_loss"
input = "y"
target = "target"
output = "loss"
)toml";

// kStream with the first occurrence of `from` replaced by `to`.
std::string edited(const std::string& from, const std::string& to,
                   const std::string& text = kStream) {
  std::string out = text;
  const std::size_t at = out.find(from);
  REQUIRE(at != std::string::npos);
  return out.replace(at, from.size(), to);
}

// "LINE:COL" of `value` (a key, or a value after the '=') on the first line starting with `line`.
std::string location(const std::string& text, const std::string& line, const std::string& value) {
  std::istringstream in(text);
  std::string current;
  for (int number = 1; std::getline(in, current); ++number) {
    if (current.rfind(line, 0) != 0) continue;
    // A key is located at its start; a value after the '='.
    const std::size_t column =
        current.rfind(value, 0) == 0 ? 0 : current.find(value, current.find('='));
    REQUIRE(column != std::string::npos);
    return std::to_string(number) + ":" + std::to_string(column + 1);
  }
  FAIL("no line starts with " << line);
  return "";
}

// parse_scenario must throw an InputError "s.toml:LOC: PATH: ..." containing `what`.
void expect_error(const std::string& text, const std::string& loc, const std::string& path,
                  const std::string& what) {
  try {
    shardsim::parse_scenario(text, "s.toml");
    FAIL("expected an InputError at " << loc << " " << path);
  } catch (const shardsim::InputError& e) {
    const std::string message = e.what();
    INFO(message);
    CHECK(message.rfind("s.toml:" + loc + ": " + path + ": ", 0) == 0);
    CHECK(message.find(what) != std::string::npos);
  }
}

struct CliResult {
  int exit_code = -1;
  std::string err;
};

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Runs `shardsim run --quiet` on `text` in a fresh directory (optionally with --report there).
CliResult run_cli(const std::string& text, bool report, std::vector<std::string>* entries) {
  static int counter = 0;
  const fs::path dir =
      fs::temp_directory_path() /
      ("shardsim_streaming_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "s.toml", std::ios::binary) << text;
  const std::string command = std::string("'") + SHARDSIM_BINARY + "' run --quiet '" +
                              (dir / "s.toml").string() + "'" +
                              (report ? " --report '" + (dir / "r.json").string() + "'" : "") +
                              " > /dev/null 2> '" + (dir / "err").string() + "'";
  const int status = std::system(command.c_str());
  REQUIRE(WIFEXITED(status));
  CliResult result{WEXITSTATUS(status), slurp(dir / "err")};
  if (entries) {
    for (const auto& entry : fs::directory_iterator(dir)) {
      entries->push_back(entry.path().filename().string());
    }
  }
  fs::remove_all(dir);
  return result;
}

}  // namespace

TEST_CASE("[stream] chunk lengths are validated with located errors", "[streaming]") {
  REQUIRE_NOTHROW(shardsim::parse_scenario(kStream, "s.toml"));
  const std::string zero = edited("chunks = [5, 3, 6]", "chunks = [5, 0, 9]");
  expect_error(zero, location(zero, "chunks =", "0"), "stream.chunks[1]",
               "a chunk length must be positive, got 0");
  const std::string short_sum = edited("chunks = [5, 3, 6]", "chunks = [5, 3, 5]");
  expect_error(short_sum, location(short_sum, "chunks =", "["), "stream.chunks",
               "chunk lengths sum to 13 but tensor 'x' [batch=1, seq=14, hidden=4] has seq=14");
  const std::string axis = edited("axis = \"seq\"", "axis = \"time\"");
  expect_error(axis, location(axis, "axis = \"time\"", "\"time\""), "stream.axis",
               "no input or target has an axis 'time' to stream");
  const std::string typo = edited("chunks = [5, 3, 6]", "chunk = [5, 3, 6]");
  expect_error(typo, location(typo, "chunk =", "chunk"), "stream.chunk",
               "unknown key 'chunk' (did you mean 'chunks'?)");
  const std::string empty = edited("chunks = [5, 3, 6]", "chunks = []");
  expect_error(empty, location(empty, "chunks =", "["), "stream.chunks",
               "needs at least one chunk length");
}

TEST_CASE("sliding_window_attention validates its plan with located errors", "[streaming]") {
  for (const std::string bad : {"window = 0", "window = -3"}) {
    const std::string text = edited("window = 4", bad);
    expect_error(text, location(text, "window =", bad.substr(9)), "steps[0].window",
                 "window must be >= 1 key (omit it for plain causal attention)");
  }
  const std::string odd = edited("head_dim = 2\n", "head_dim = 3\n");
  expect_error(odd, location(odd, "head_dim =", "3"), "steps[0].head_dim", "head_dim must be even");
  const std::string wide = edited("shape = [4, 2, 2]", "shape = [4, 3, 2]");
  expect_error(wide, location(wide, "wq =", "\"wq\""), "steps[0].wq",
               "shape mismatch: 'wq' is [hidden=4, head=3, head_dim=2] but 'x' [batch=1, seq=14, "
               "hidden=4] with n_head = 2, head_dim = 2 needs [hidden=4, head=2, head_dim=2]");
  // Queries sharded on the hidden axis: neither Replicate nor Shard(seq).
  const std::string hidden =
      edited("shape = [1, 14, 4]\n", "shape = [1, 14, 4]\nplacement = \"Shard(hidden)\"\n");
  expect_error(hidden, location(hidden, "input = \"x\"", "\"x\""), "steps[0].input",
               "'x' must be Replicate or Shard(seq) over the cp group");
  // Sequence-sharded queries (x and the target Shard(seq)) stream in every mode (the cache stays
  // on the tokens' owners: attention_stream_sharded_test.cpp); the padded split is refused.
  std::string sharded = kStream;
  for (std::size_t at = 0; (at = sharded.find("shape = [1, 14, 4]\n", at)) != std::string::npos;) {
    sharded.insert(at + 19, "placement = \"Shard(seq)\"\n");
    at += 19;
  }
  const std::string sharded_ring = edited("cp_mode = \"allgather\"", "cp_mode = \"ring\"", sharded);
  CHECK_NOTHROW(shardsim::parse_scenario(sharded_ring, "s.toml"));
  std::string padded = sharded;
  for (std::size_t at = 0; (at = padded.find("\"Shard(seq)\"", at)) != std::string::npos;) {
    padded.replace(at, 12, "\"Shard(seq, padded)\"");
    at += 20;
  }
  expect_error(padded, location(padded, "input = \"x\"", "\"x\""), "steps[0].input",
               "need a chunk, balanced or zigzag split");
  CHECK_NOTHROW(shardsim::parse_scenario(sharded, "s.toml"));
  // A fault of the Replicate-input plan has nothing to change in the sequence-sharded one.
  const std::string sharded_fault =
      edited("train_steps = 2", "train_steps = 2\nfaults = [\"rope_local_positions\"]", sharded);
  expect_error(sharded_fault, location(sharded_fault, "input = \"x\"", "\"x\""),
               "steps[0].input", "changes the plan of a Replicate input");
  const std::string ring =
      edited("cp_mode = \"allgather\"", "cp_mode = \"ring\"",
             edited("train_steps = 2", "faults = [\"rope_after_gather_wrong_offset\"]"));
  expect_error(ring, location(ring, "cp_mode =", "\"ring\""), "steps[0].cp_mode",
               "needs cp_mode = \"allgather\"");
  const std::string valid_lengths =
      edited("output = \"loss\"\n", "output = \"loss\"\nvalid_lengths = [10]\n");
  expect_error(valid_lengths, location(valid_lengths, "valid_lengths =", "["),
               "steps[1].valid_lengths", "not supported with [stream]");
}

TEST_CASE("a pointless but valid plan warns on stderr and keeps the exit code", "[streaming]") {
  // window 4 over 4 ranks: about one key of a query's window per shard.
  const CliResult warned = run_cli(edited("ranks = 2", "ranks = 4"), false, nullptr);
  CHECK(warned.exit_code == 0);
  CHECK(warned.err.find("steps[0].window: warning: window = 4 over cp_size = 4 ranks") !=
        std::string::npos);
  const CliResult quiet = run_cli(kStream, false, nullptr);  // window 4 over 2 ranks
  CHECK(quiet.exit_code == 0);
  CHECK(quiet.err.empty());
  std::vector<std::string> entries;
  const CliResult bad = run_cli(edited("window = 4", "window = 0"), true, &entries);
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("steps[0].window: window must be >= 1") != std::string::npos);
  CHECK(entries == std::vector<std::string>{"err", "s.toml"});  // no report left behind
}

TEST_CASE("the runner streams chunks and names them at every boundary", "[streaming]") {
  const shardsim::Scenario scenario = shardsim::parse_scenario(kStream, "s.toml");
  const shardsim::RunReport report = shardsim::evaluate(scenario, shardsim::parse_precision("f64"));
  CHECK(report.pass);
  std::map<std::pair<int, int>, std::vector<std::string>> tensors;  // (step, chunk) -> tensors
  int updates = 0;
  for (const shardsim::BoundaryResult& b : report.boundaries) {
    const shardsim::TraceEntry& e = b.entry;
    tensors[{e.step, e.chunk}].push_back(e.tensor);
    if (e.op == "sgd") ++updates;
    // allgather is the dense arithmetic: everything is bitwise, claimed or not.
    CHECK(b.status == shardsim::Status::exact);
    if (e.op == "input" && e.tensor == "x" && e.global.extent("seq") != 14) {
      const std::int64_t lengths[3] = {5, 3, 6};
      CHECK(e.global.extent("seq") == lengths[e.chunk - 1]);
    }
  }
  // 2 steps x 3 chunks, an update of each of the 4 projections per chunk.
  CHECK(tensors.size() == 6);
  CHECK(updates == 2 * 3 * 4);
  for (int step = 1; step <= 2; ++step) {
    for (int chunk = 1; chunk <= 3; ++chunk) {
      const std::vector<std::string>& names = tensors[{step, chunk}];
      const bool cached = std::find(names.begin(), names.end(), "y.cache_k") != names.end();
      INFO("step " << step << " chunk " << chunk);
      CHECK(cached == (chunk > 1));  // the cache starts empty at every training step
    }
  }
}

TEST_CASE("cache_raw_k passes chunk 1 and first diverges at chunk 2", "[streaming]") {
  const std::string text = edited("train_steps = 2", "faults = [\"cache_raw_k\"]");
  const shardsim::Scenario scenario = shardsim::parse_scenario(text, "s.toml");
  for (const char* level : {"f32", "f64"}) {
    const shardsim::RunReport report =
        shardsim::evaluate(scenario, shardsim::parse_precision(level));
    INFO(level);
    REQUIRE(report.first_divergence);
    CHECK(report.first_divergence->chunk == 2);
    CHECK(report.first_divergence->step == 1);
    CHECK(report.first_divergence->tensor == "y.cache_k");
    for (const shardsim::BoundaryResult& b : report.boundaries) {
      if (b.entry.chunk == 1) CHECK(b.status == shardsim::Status::exact);
    }
  }
}

TEST_CASE("streamed Shard(seq) inputs are laid out per chunk", "[streaming]") {
  // Chunk 2 has 2 tokens over 4 ranks: torch.chunk gives 1, 1, 0, 0 (empty shards).
  const std::string text = R"toml(precisions = ["f64"]
train_steps = 1
[mesh]
ranks = 4
[stream]
axis = "seq"
chunks = [5, 2, 6]
[[tensors]]
name = "x"
axes = ["batch", "seq", "hidden"]
shape = [2, 13, 4]
placement = "Shard(seq)"
[[tensors]]
name = "t"
role = "target"
axes = ["batch", "seq", "hidden"]
shape = [2, 13, 4]
placement = "Shard(seq)"
[[tensors]]
name = "w"
role = "parameter"
axes = ["hidden"]
shape = [4]
[[steps]]
op = "layer_norm"
input = "x"
weight = "w"
output = "y"
[[steps]]
op = "mse_loss"
input = "y"
target = "t"
output = "loss"
)toml";
  const shardsim::RunReport report = shardsim::evaluate(shardsim::parse_scenario(text, "s.toml"),
                                                        shardsim::parse_precision("f64"));
  CHECK(report.pass);
  bool seen = false;
  for (const shardsim::BoundaryResult& b : report.boundaries) {
    const shardsim::TraceEntry& e = b.entry;
    if (e.op != "input" || e.tensor != "x" || e.chunk != 2) continue;
    seen = true;
    const std::int64_t expected[4] = {1, 1, 0, 0};
    for (const shardsim::RankExtent& r : e.ranks) {
      CHECK(r.local_shape.extent("seq") == expected[r.rank]);
    }
  }
  CHECK(seen);
}

TEST_CASE("cp_size < 1 is rejected as mesh.ranks", "[streaming]") {
  const std::string text = edited("ranks = 2", "ranks = 0");
  expect_error(text, location(text, "ranks =", "0"), "mesh.ranks", "ranks must be in [1, 4096]");
}

TEST_CASE("without [stream] there is one chunk", "[streaming]") {
  std::string text = edited("[stream]\naxis = \"seq\"\nchunks = [5, 3, 6]\n", "");
  const shardsim::RunReport report = shardsim::evaluate(shardsim::parse_scenario(text, "s.toml"),
                                                        shardsim::parse_precision("f64"));
  CHECK(report.pass);
  for (const shardsim::BoundaryResult& b : report.boundaries) CHECK(b.entry.chunk == 1);
}
