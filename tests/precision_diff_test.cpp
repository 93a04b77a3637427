// shardsim precision: exact mp metrics (hand-derived), the verdict rule, end-to-end runs of the
// bundled LayerNorm scenarios, the reduce-order sweep and the heatmap layout.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "core/error.hpp"
#include "report/html_report.hpp"
#include "precision/precision_diff.hpp"

using namespace shardsim;
namespace fs = std::filesystem;

namespace {

// Runs `shardsim ARGS` in `dir`'s out/err files; returns the exit code.
int run_cli(const fs::path& dir, const std::string& args) {
  const std::string command = std::string("'") + SHARDSIM_BINARY + "' " + args + " > '" +
                              (dir / "out").string() + "' 2> '" + (dir / "err").string() + "'";
  const int status = std::system(command.c_str());
  REQUIRE(WIFEXITED(status));
  return WEXITSTATUS(status);
}

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

Scenario source_scenario(const std::string& name) {
  return load_scenario(std::string(SHARDSIM_SOURCE_DIR) + "/scenarios/" + name);
}

std::vector<Precision> levels(std::initializer_list<const char*> names) {
  std::vector<Precision> out;
  for (const char* n : names) out.push_back(parse_precision(n));
  return out;
}

const BoundaryDiff& by_id(const PrecisionDiff& diff, int id) {
  for (const BoundaryDiff& b : diff.boundaries) {
    if (b.entry.id == id) return b;
  }
  FAIL("no boundary #" << id);
  return diff.boundaries.front();
}

}  // namespace

TEST_CASE("precision: exact mp error against the top level, derived by hand", "[precision]") {
  // Top value 1 + 2^-128 (129 bits, fits the 130 bits of mp128, so rounding keeps it); level
  // value 1. |e| = 2^-128; ulp at 130 bits of a number in [1, 2) is 2^(1 - 130) = 2^-129, so the
  // error is 2 ulp; rel = 2^-128 / (1 + 2^-128), which rounds to 2^-128 in double.
  LevelMetrics m = detail::mp_level_error({"0x1p+0"}, {"0x1.00000000000000000000000000000001p+0"},
                                          130, 257);
  CHECK(m.max_abs == Magnitude::scaled(1, -128));
  CHECK(m.max_ulp == 2.0);
  CHECK(m.max_rel == Magnitude::scaled(1, -128));
  // Top value 1 + 2^-140 needs 141 bits: rounded once to 130 bits it is 1, so a level value of 1
  // has no error. (Comparing unrounded would report 2^-140.)
  m = detail::mp_level_error({"0x1p+0"}, {"0x1.0000000000000000000000000000000001p+0"}, 130, 257);
  CHECK(m.max_abs.is_zero());
  CHECK(m.max_ulp == 0);
  // NaN never matches; equal infinities do.
  CHECK(std::isinf(detail::mp_level_error({"nan"}, {"0x1p+0"}, 130, 257).max_ulp));
  CHECK(detail::mp_level_error({"inf"}, {"inf"}, 130, 257).max_ulp == 0);
}

TEST_CASE("precision: exact mp gap sums Partial addends at the level's precision", "[precision]") {
  // 1 + 2^-200 rounds to 1 at 130 bits (the sum is formed at the level's precision, as the
  // comparator does), so the gap against a dense 1 is 0; at 257 bits the sum is exact and the
  // gap is 2^-200.
  const std::string one = "0x1p+0", tiny = "0x1p-200";
  CHECK(detail::mp_abs_gap({&one, &tiny}, one, 130).is_zero());
  CHECK(detail::mp_abs_gap({&one, &tiny}, one, 257) == Magnitude::scaled(1, -200));
  CHECK(detail::mp_abs_gap({&tiny}, one, 257) == Magnitude::of(1.0 - std::ldexp(1.0, -200)));
}

TEST_CASE("precision: sequence-sharded LayerNorm is exact at every level", "[precision]") {
  const Scenario scenario = source_scenario("layernorm_sequence_sharded.toml");
  const PrecisionDiff diff = precision_diff(scenario, {levels({"mp256", "f32", "mp128", "f64"}), {}, {}});
  REQUIRE(diff.levels == levels({"f32", "f64", "mp128", "mp256"}));  // sorted by bits
  CHECK(diff.significand_bits == std::vector<unsigned>{24, 53, 128, 257});  // as run (mp.hpp)
  for (const BoundaryDiff& b : diff.boundaries) {
    INFO(b.entry.tensor);
    CHECK(b.verdict == Verdict::exact);
    CHECK(b.error.back().max_abs.is_zero());  // the top level against itself
  }
  // y's error against mp256 shrinks with precision (LayerNorm's rounding is not exact at any
  // level here: inputs are f32 values, but the mean, variance and sqrt round).
  const BoundaryDiff& y = by_id(diff, 5);
  REQUIRE(y.entry.tensor == "y");
  CHECK(y.error[0].max_rel > y.error[1].max_rel);
  CHECK(y.error[1].max_rel > y.error[2].max_rel);
  CHECK_FALSE(y.error[2].max_rel.is_zero());
  // ... and each level is within a few hundred ulps of the truth in its own type.
  for (std::size_t l = 0; l < 3; ++l) CHECK(y.error[l].max_ulp < 1024);
  CHECK_THROWS_AS(precision_diff(scenario, {levels({"f64", "f64"}), {}, {}}), InputError);
}

TEST_CASE("precision: reordered Partial sums are noise that shrinks with precision", "[precision]") {
  const Scenario scenario = source_scenario("layernorm_train_sequence_sharded.toml");
  PrecisionDiffOptions options{levels({"f32", "f64", "mp128", "mp256"}),
                               {ReduceOrder::rank, ReduceOrder::ring, ReduceOrder::tree}, {}};
  const PrecisionDiff diff = precision_diff(scenario, options);
  for (const BoundaryDiff& b : diff.boundaries) {
    INFO("#" << b.entry.id << " " << b.entry.tensor << ": " << b.why);
    CHECK((b.verdict == Verdict::exact || b.verdict == Verdict::noise));
  }
  // #11 is grad(ln.weight) as per-rank Partial shares: its sum differs from the oracle's by
  // rounding, about 2^-bits relative at each level.
  const BoundaryDiff& grad = by_id(diff, 11);
  REQUIRE(grad.entry.tensor == "grad(ln.weight)");
  CHECK(grad.verdict == Verdict::noise);
  CHECK(grad.gap[0].normwise > grad.gap[1].normwise);
  CHECK(grad.gap[1].normwise > grad.gap[2].normwise);
  CHECK(grad.gap[2].normwise > grad.gap[3].normwise);
  CHECK(grad.gap[3].normwise <= Magnitude::scaled(1, -240));
  // ... one bit per bit: the fitted slope is -1 within the rounding of a handful of additions.
  REQUIRE(grad.trend.slope);
  CHECK(*grad.trend.slope == Approx(-1).margin(0.05));

  // The sweep: inputs never move; the data a collective sums may move (by a few ulps).
  REQUIRE(diff.sweep);
  const OrderSweep& sweep = *diff.sweep;
  REQUIRE(sweep.rows.size() == diff.boundaries.size());
  CHECK(sweep.rows[0].spread_ulp == std::vector<double>{0, 0});  // input x
  double moved = 0;
  for (const OrderSweepRow& row : sweep.rows) {
    moved = std::max(moved, row.spread_ulp[1]);
    CHECK(row.gap[0].size() == 3);
  }
  CHECK(moved > 0);   // some f64 result depends on the order alone
  CHECK(moved < 1e4);  // ... but only by rounding
  // The sweep's first order is the order the levels ran with: the same gap.
  CHECK(sweep.rows[11].gap[0][0] == grad.gap[0].normwise.to_double());
}

TEST_CASE("precision: heatmap rows, columns and shard edges", "[precision]") {
  const Scenario scenario = source_scenario("layernorm_train_sequence_sharded.toml");
  const PrecisionDiff diff = precision_diff(scenario, {levels({"f32", "f64"}), {}, {}});
  const auto y = find_boundary(diff, "y");
  REQUIRE(y);
  CHECK(diff.boundaries[*y].entry.id == 6);  // the first step's y
  CHECK(find_boundary(diff, "#29") == find_boundary(diff, "29"));
  CHECK_FALSE(find_boundary(diff, "nope"));
  CHECK_FALSE(find_boundary(diff, "#999"));
  // [batch=2, seq=13, hidden=16] Shard(seq) over 4 ranks (4,4,4,1): 26 token rows, 16 columns,
  // an edge above seq = 4, 8, 12 in each batch: rows 4, 8, 12 and 13+4, 13+8, 13+12.
  const Heatmap map = make_heatmap(diff, 0, *y);
  CHECK(map.rows == 26);
  CHECK(map.columns == 16);
  CHECK(map.column_axis == "hidden");
  CHECK(map.row_axes == "batch x seq");
  CHECK(map.row_edges == std::vector<std::int64_t>{4, 8, 12, 17, 21, 25});
  CHECK(map.column_edges.empty());
  CHECK(map.row_labels[17] == "batch=1 seq=4");
  for (const Magnitude& v : map.values) CHECK(v.is_zero());  // step 1's y is exact
  // Step 2's grad(x) (#29) has f32 gaps, and none on batch 1's padding tokens (seq >= 9).
  const Heatmap grad = make_heatmap(diff, 0, *find_boundary(diff, "#29"));
  double total = 0;
  for (const Magnitude& v : grad.values) total += v.to_double();
  CHECK(total > 0);
  for (std::int64_t row = 13 + 9; row < 26; ++row) {
    for (std::int64_t c = 0; c < 16; ++c) CHECK(grad.values[static_cast<std::size_t>(row * 16 + c)].is_zero());
  }
  const std::string html = precision_html(diff, y, {map, grad});
  CHECK(html.find("<svg") != std::string::npos);
  CHECK(html.find("<script") == std::string::npos);  // self-contained: no scripts,
  CHECK(html.find("href=") == std::string::npos);    // no links,
  CHECK(html.find("src=") == std::string::npos);     // no external resources
  CHECK(html.find("class=\"edge\"") != std::string::npos);
}

TEST_CASE("precision: the CLI writes the JSON and HTML reports and checks its usage",
          "[precision]") {
  const fs::path dir = fs::temp_directory_path() / ("shardsim_precision_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string scenario =
      "'" + (fs::path(SHARDSIM_SOURCE_DIR) / "scenarios" / "layernorm_train_sequence_sharded.toml").string() + "'";
  const std::string json = "'" + (dir / "p.json").string() + "'";
  const std::string html = "'" + (dir / "p.html").string() + "'";
  REQUIRE(run_cli(dir, "precision " + scenario + " --levels f32,f64,mp128 --reduce-order rank,tree "
                       "--json " + json + " --html " + html + " --heatmap '#29'") == 0);
  const std::string out = slurp(dir / "out");
  CHECK(out.find("verdicts: ") != std::string::npos);
  CHECK(out.find("reduce-order sweep over rank tree") != std::string::npos);
  for (const std::string& line : [&] {
         std::vector<std::string> lines;
         std::istringstream in(out);
         for (std::string l; std::getline(in, l);) lines.push_back(l);
         return lines;
       }()) {
    CHECK(line.size() <= 100);  // readable in a 100-column terminal
  }
  const auto report = nlohmann::json::parse(slurp(dir / "p.json"));
  CHECK(report["top"] == "mp128");
  CHECK(report["levels"].size() == 3);
  CHECK(report["boundaries"][11]["verdict"] == "noise");
  CHECK(report["boundaries"][11]["levels"][0]["gap"]["status"] == "within");
  CHECK(report["reduce_order_sweep"]["orders"] == nlohmann::json{"rank", "tree"});
  CHECK(report["trend_rule"]["noise_slope_max"] == -0.5);
  CHECK(report["trend_rule"]["min_levels"] == 3);
  const auto& trend = report["boundaries"][11]["trend"];
  CHECK(trend["fitted_levels"] == nlohmann::json{"f32", "f64", "mp128"});
  CHECK(trend["slope"].get<double>() == Approx(-1).margin(0.05));
  CHECK(report["boundaries"][11]["levels"][2]["gap"]["log2_normwise"].get<double>() < -120);
  const std::string page = slurp(dir / "p.html");
  CHECK(page.find("#29 grad(x) at f32") != std::string::npos);
  CHECK(page.find("<section id=\"opened\" data-boundary=\"29\">") != std::string::npos);  // --heatmap
  CHECK(page.find("<script") == std::string::npos);

  // Usage errors: exit 2, no output files.
  fs::remove(dir / "p.json");
  fs::remove(dir / "p.html");
  CHECK(run_cli(dir, "precision " + scenario + " --heatmap y") == 2);
  CHECK(slurp(dir / "err").find("--heatmap needs --html FILE") != std::string::npos);
  CHECK(run_cli(dir, "precision " + scenario + " --html " + html + " --heatmap nope") == 2);
  CHECK(run_cli(dir, "precision " + scenario + " --levels f64,f64 --json " + json) == 2);
  CHECK(run_cli(dir, "precision " + scenario + " --reduce-order rank,spiral") == 2);
  CHECK_FALSE(fs::exists(dir / "p.json"));
  CHECK_FALSE(fs::exists(dir / "p.html"));
  fs::remove_all(dir);
}
