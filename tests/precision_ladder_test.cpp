// shardsim precision, the trend verdict on bundled scenarios: ill-conditioned but correct
// arithmetic, every seeded fault, the reduce-order-only scenarios, gaps far below the double
// range at mp2048, and what the HTML report opens on and draws.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <regex>
#include <string>

#include "precision/precision_diff.hpp"
#include "report/html_report.hpp"

using namespace shardsim;
namespace fs = std::filesystem;

namespace {

Scenario source_scenario(const std::string& name) {
  return load_scenario(std::string(SHARDSIM_SOURCE_DIR) + "/scenarios/" + name);
}

std::vector<Precision> levels(std::initializer_list<const char*> names) {
  std::vector<Precision> out;
  for (const char* n : names) out.push_back(parse_precision(n));
  return out;
}

const BoundaryDiff& by_tensor(const PrecisionDiff& diff, const std::string& tensor) {
  const auto found = find_boundary(diff, tensor);
  REQUIRE(found);
  return diff.boundaries[*found];
}

// The first divergence an [expect] block names: the first boundary that fails at some level
// with its step, tensor and, when given, chunk and op (an op can write one tensor twice, as a
// two-dim all-reduce does, and only the failing write is the divergence).
std::optional<std::size_t> expected_boundary(const PrecisionDiff& diff, const Expectation& expect) {
  for (std::size_t b = 0; b < diff.boundaries.size(); ++b) {
    const BoundaryDiff& d = diff.boundaries[b];
    const TraceEntry& e = d.entry;
    const bool fails = std::any_of(d.gap.begin(), d.gap.end(), [](const LevelGap& g) { return g.status == Status::fail; });
    if (fails && e.step == expect.step && e.tensor == expect.tensor &&
        (!expect.chunk || e.chunk == *expect.chunk) && (!expect.op || e.op == *expect.op)) {
      return b;
    }
  }
  return std::nullopt;
}

}  // namespace

TEST_CASE("ladder: hidden-18 cancellation is ill-conditioned noise, not a bug", "[precision]") {
  // var = SS/H - mean^2 with mean 1e4 and std 1 cancels log2(1e8) = 26.58 bits, and with H = 18
  // the divisions round at every level: the gap falls like 2^-bits with condition ~2^26.6.
  const Scenario scenario = source_scenario("norm_hidden_cancellation_ill_conditioned.toml");
  const PrecisionDiff diff =
      precision_diff(scenario, {levels({"f32", "f64", "mp128", "mp256", "mp512", "mp1024"}), {}, {}});
  for (const char* tensor : {"y.rstd", "y"}) {
    const BoundaryDiff& b = by_tensor(diff, tensor);
    INFO(tensor << ": " << b.why);
    CHECK(b.verdict == Verdict::ill_conditioned_noise);
    REQUIRE(b.trend.slope);
    // Six levels over 1001 bits: rounding-to-rounding differences of a few bits move the
    // slope by under 0.01.
    CHECK(*b.trend.slope == Approx(-1).margin(0.01));
    CHECK(b.trend.log2_condition == Approx(26.58).margin(1.5));
    // Every level fails the fixed 2^-(bits-16) tolerance: the old verdict said "bug".
    for (const LevelGap& g : b.gap) CHECK(g.status == Status::fail);
  }
}

TEST_CASE("ladder: gaps at mp2048 keep their exponent", "[precision]") {
  // y.rstd's gap at mp2048 is ~2^26.6 * 2^-2048, about 1e-609: below the double range (it reads 0
  // as a double). Its condition must agree with f64's, measured where doubles are enough.
  const Scenario scenario = source_scenario("norm_hidden_cancellation_ill_conditioned.toml");
  const PrecisionDiff diff = precision_diff(scenario, {levels({"f64", "mp1024", "mp2048"}), {}, {}});
  const BoundaryDiff& rstd = by_tensor(diff, "y.rstd");
  REQUIRE(diff.significand_bits[2] >= 2048);
  const double kappa_f64 = rstd.gap[0].normwise.log2() + diff.significand_bits[0];
  const double kappa_top = rstd.gap[2].normwise.log2() + diff.significand_bits[2];
  CHECK(rstd.gap[2].normwise.to_double() == 0);
  CHECK(kappa_top == Approx(kappa_f64).margin(2));
  CHECK(rstd.gap[2].max_abs.sci().find("e-60") != std::string::npos);  // ~1e-609 .. 9e-600
  CHECK(*fit_trend({{"f64", diff.significand_bits[0], rstd.gap[0].normwise},
                    {"mp1024", diff.significand_bits[1], rstd.gap[1].normwise},
                    {"mp2048", diff.significand_bits[2], rstd.gap[2].normwise}})
             .slope == Approx(-1).margin(0.01));
}

TEST_CASE("ladder: the exact mp gap agrees with the comparator where doubles suffice", "[precision]") {
  // A dp x tp mesh with Partial, Replicate and sharded boundaries: compare_sites must visit what
  // the comparator visits. At mp128 the gaps (~1e-38) are normal doubles, so the comparator's
  // double max_abs and max_rel (|s - d| rounded at mp, then to double) and the exact ones
  // (rounded once to 53 bits) agree to a double's rounding.
  const Scenario scenario = source_scenario("mesh_dp_tp_mlp_sequence_parallel.toml");
  const PrecisionDiff diff = precision_diff(scenario, {levels({"f64", "mp128"}), {}, {}});
  int compared = 0;
  for (std::size_t b = 0; b < diff.boundaries.size(); ++b) {
    const BoundaryResult& run = diff.runs[1].boundaries[b];
    if (!run.captured->has_dense) continue;
    const LevelGap& exact = diff.boundaries[b].gap[1];
    INFO("#" << run.entry.id << " " << run.entry.tensor);
    CHECK(exact.max_abs.to_double() == Approx(run.max_abs.to_double()).epsilon(1e-15));
    CHECK(exact.max_rel.to_double() == Approx(run.max_rel.to_double()).epsilon(1e-15));
    compared += !run.max_abs.is_zero();
  }
  CHECK(compared > 10);
}

TEST_CASE("ladder: every seeded fault is a bug at its first divergence, clean twins have none",
          "[precision]") {
  // mp128 as the top keeps this quick; three levels are the fewest that give a trend.
  int faults = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(SHARDSIM_SOURCE_DIR) / "scenarios" / "faults")) {
    if (entry.path().extension() != ".toml") continue;
    const Scenario scenario = load_scenario(entry.path().string());
    const PrecisionDiff diff = precision_diff(scenario, {levels({"f32", "f64", "mp128"}), {}, {}});
    INFO(entry.path().filename().string());
    if (scenario.expect.pass) {
      for (const BoundaryDiff& b : diff.boundaries) {
        INFO("#" << b.entry.id << " " << b.entry.tensor << ": " << b.why);
        CHECK(b.verdict != Verdict::bug);
      }
      continue;
    }
    ++faults;
    const auto expected = expected_boundary(diff, scenario.expect);
    REQUIRE(expected);
    const BoundaryDiff& b = diff.boundaries[*expected];
    INFO("#" << b.entry.id << " " << b.entry.tensor << ": " << b.why);
    CHECK(b.verdict == Verdict::bug);
    // ... and the HTML report opens on it: no bug comes before the first divergence.
    CHECK(first_divergent_boundary(diff) == expected);
  }
  CHECK(faults >= 25);
}

TEST_CASE("ladder: scenarios that differ from the oracle only by reduction order are noise",
          "[precision]") {
  // Hidden-sharded statistics (sum/sumsq and Welford merges), Partial parameter gradients,
  // tensor-parallel row-linear sums and ring attention's LSE merges: the sharded program adds the
  // same terms in another order. Nothing else differs, so no boundary may be a bug, and none is
  // ill-conditioned (these are well-scaled sums).
  for (const char* name : {"norm_hidden_sum_sumsq.toml", "norm_hidden_welford.toml",
                           "layernorm_train_sequence_sharded.toml", "mlp_tensor_parallel.toml",
                           "mlp_sequence_parallel_no_dropout.toml", "attention_causal_cp3_ring.toml"}) {
    const PrecisionDiff diff =
        precision_diff(source_scenario(name), {levels({"f32", "f64", "mp128", "mp256"}), {}, {}});
    int noise = 0;
    for (const BoundaryDiff& b : diff.boundaries) {
      INFO(name << " #" << b.entry.id << " " << b.entry.tensor << ": " << b.why);
      CHECK((b.verdict == Verdict::exact || b.verdict == Verdict::noise || b.verdict == Verdict::not_applicable));
      noise += b.verdict == Verdict::noise;
    }
    INFO(name);
    CHECK(noise > 0);
  }
}

TEST_CASE("ladder: the HTML report opens on the first divergence and its axes cover the data",
          "[precision]") {
  const Scenario scenario = source_scenario("norm_hidden_cancellation_ill_conditioned.toml");
  const PrecisionDiff diff =
      precision_diff(scenario, {levels({"f32", "f64", "mp128", "mp256", "mp512", "mp1024"}), {}, {}});
  // No bug here: the first ill-conditioned boundary, y.rstd (#4), though y (#5) has a larger gap.
  const auto opened = first_divergent_boundary(diff);
  REQUIRE(opened);
  CHECK(diff.boundaries[*opened].entry.tensor == "y.rstd");
  const std::string html = precision_html(diff, opened, {make_heatmap(diff, 0, *opened)});
  CHECK(html.find("<section id=\"opened\" data-boundary=\"4\">") != std::string::npos);
  CHECK(html.find("<section id=\"opened\"") < html.find("<h2>Verdicts</h2>"));  // first on the page
  // Every chart's y axis spans every value plotted: the largest is y's f32 gap, ~2.5e2 (above
  // the old 1e0 ceiling), the smallest mp512's error against mp1024 (~1e-154) or mp1024's gap
  // (~3e-301).
  double lo = INFINITY, hi = -INFINITY;
  for (const BoundaryDiff& b : diff.boundaries) {
    for (std::size_t l = 0; l < diff.levels.size(); ++l) {
      for (const Magnitude& v : {b.error[l].max_rel, b.gap[l].normwise}) {
        if (!v.is_finite() || v.is_zero()) continue;
        lo = std::min(lo, std::log10(2.0) * v.log2());
        hi = std::max(hi, std::log10(2.0) * v.log2());
      }
    }
  }
  CHECK(hi > 2);
  CHECK(lo < -300);
  const std::regex axis("data-ymin=\"(-?[0-9]+)\" data-ymax=\"(-?[0-9]+)\"");
  int charts = 0;
  for (auto it = std::sregex_iterator(html.begin(), html.end(), axis); it != std::sregex_iterator(); ++it) {
    CHECK(std::stod((*it)[1]) <= lo);
    CHECK(std::stod((*it)[2]) >= hi);
    ++charts;
  }
  CHECK(charts == static_cast<int>(diff.boundaries.size()) + 1);  // the opened one drawn twice
  // Each chart shows its boundary's fitted slope.
  CHECK(html.find("class=\"a slope\">slope -1.00/bit, condition 2^") != std::string::npos);
}

TEST_CASE("ladder: a heatmap's labels fit in its drawing", "[precision]") {
  // The scalar loss: one column, a long axis label; the drawing must be wide enough for it at
  // 6 px a character (an upper bound at the 10 px font).
  const Scenario scenario = source_scenario("layernorm_train_sequence_sharded.toml");
  const PrecisionDiff diff = precision_diff(scenario, {levels({"f32", "f64", "mp128"}), {}, {}});
  const auto loss = find_boundary(diff, "loss");
  REQUIRE(loss);
  const Heatmap map = make_heatmap(diff, 0, *loss);
  const std::string html = precision_html(diff, loss, {map});
  std::smatch width, label;
  const std::string from = html.substr(html.find("<svg", html.find("<h3>")));
  REQUIRE(std::regex_search(from, width, std::regex("<svg[^>]* width=\"([0-9.]+)\"")));
  REQUIRE(std::regex_search(from, label, std::regex("<text x=\"([0-9.]+)\"[^>]*>([^<]*\\(rows: [^<]*)</text>")));
  CHECK(std::stod(width[1]) >= std::stod(label[1]) + 6 * static_cast<double>(label[2].length()));
}
