// shardsim precision: the terminal table and the JSON report (keys documented in docs/reports.md).
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "report/precision_report.hpp"

#include "report/json_metric.hpp"
#include "report/report.hpp"

namespace shardsim {

namespace {

using Json = nlohmann::ordered_json;


std::string cell(double v);

// ULP counts are integers for f32/f64 and fractional at mp: printed plainly below 1e6.
std::string ulp_cell(double v) {
  if (!(v < 1e6)) return cell(v);
  char buf[32];
  std::snprintf(buf, sizeof buf, v == std::floor(v) ? "%.0f" : "%.1f", v);
  return buf;
}

std::string cell(double v) {
  if (v == 0) return "0";
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return "inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2e", v);
  return buf;
}

std::string cell(const Magnitude& v) { return v.sci(); }

// "   verdict: noise (why ...)" wrapped at 100 columns, continuation lines indented.
std::string verdict_line(const BoundaryDiff& b) {
  std::string text = std::string("   verdict: ") + verdict_name(b.verdict);
  if (b.why.empty()) return text + "\n";
  std::string out;
  std::istringstream words(" (" + b.why + ")");
  for (std::string word; words >> word;) {
    if (text.size() + 1 + word.size() > 100) {
      out += text + "\n";
      text = "      " + word;
    } else {
      text += " " + word;
    }
  }
  return out + text + "\n";
}

Json trend_json(const PrecisionDiff& diff, const BoundaryDiff& b) {
  const TrendFit& t = b.trend;
  Json fitted = Json::array();
  for (std::size_t l : t.fitted) fitted.push_back(diff.levels[l].name());
  auto optional_number = [](const std::optional<double>& v) { return v ? Json(*v) : Json(nullptr); };
  return Json{{"fitted_levels", fitted},
              {"slope", optional_number(t.slope)},
              {"intercept", optional_number(t.intercept)},
              {"vanishes", t.vanishes},
              {"condition_level", t.condition_level ? Json(diff.levels[*t.condition_level].name()) : Json(nullptr)},
              {"log2_condition", t.condition_level ? Json(t.log2_condition) : Json(nullptr)}};
}

Json shape_json(const Shape& shape) {
  Json out = Json::object();
  for (const Axis& axis : shape.axes()) out[axis.name] = axis.extent;
  return out;
}

}  // namespace

std::string format_precision_diff(const PrecisionDiff& diff) {
  std::ostringstream out;
  const std::size_t top = diff.levels.size() - 1;
  out << "precision diff: " << diff.scenario << ", levels";
  for (const Precision& p : diff.levels) out << " " << p.name();
  out << "\ntop level " << diff.levels[top].name() << " (" << diff.significand_bits[top]
      << "-bit significand), reduce order " << reduce_order_name(diff.reduce_order) << "\n"
      << "error vs top: each level's oracle value against the top value rounded once to the\n"
      << "level's type (ulp in that type); gap: sharded vs dense at the level (normwise = "
         "max_abs/max|d|)\n"
      << "verdict: the trend of log2(normwise gap) against the levels' significand bits (rounding\n"
      << "noise falls one bit per bit: slope -1; a bug stays flat: slope 0; see "
         "docs/precisions.md)\n";
  char line[160];
  std::map<Verdict, int> counts;
  for (const BoundaryDiff& b : diff.boundaries) {
    const TraceEntry& e = b.entry;
    ++counts[b.verdict];
    out << "\n#" << e.id << " step " << e.step << " chunk " << e.chunk << "  " << e.op << " -> "
        << e.tensor << "\n   " << e.global.str() << " " << e.layout.str()
        << (e.exact ? ", exact claimed" : "") << "\n";
    std::snprintf(line, sizeof line, "   %-7s %10s %10s %10s | %-9s %10s %10s %10s\n", "level",
                  "err_abs", "err_rel", "err_ulp", "gap", "gap_abs", "normwise", "gap_ulp");
    out << line;
    for (std::size_t l = 0; l < diff.levels.size(); ++l) {
      const LevelMetrics& err = b.error[l];
      const LevelGap& gap = b.gap[l];
      std::snprintf(line, sizeof line, "   %-7s %10s %10s %10s | %-9s %10s %10s %10s\n",
                    diff.levels[l].name().c_str(), cell(err.max_abs).c_str(),
                    cell(err.max_rel).c_str(), ulp_cell(err.max_ulp).c_str(),
                    std::string(status_name(gap.status)).c_str(), cell(gap.max_abs).c_str(),
                    cell(gap.normwise).c_str(), ulp_cell(gap.max_ulp).c_str());
      out << line;
    }
    out << verdict_line(b);
  }
  out << "\nverdicts: " << counts[Verdict::exact] << " exact, " << counts[Verdict::noise] << " noise, "
      << counts[Verdict::ill_conditioned_noise] << " ill-conditioned noise, " << counts[Verdict::bug]
      << " bug, " << counts[Verdict::undetermined] << " undetermined, "
      << counts[Verdict::not_applicable] << " n/a\n";
  if (diff.levels.size() < kMinTrendLevels) {
    out << "(a trend needs at least " << kMinTrendLevels << " levels: boundaries with a gap are "
        << "undetermined; add e.g. mp128)\n";
  }
  if (diff.sweep) {
    const OrderSweep& s = *diff.sweep;
    out << "\nreduce-order sweep over";
    for (ReduceOrder o : s.orders) out << " " << reduce_order_name(o);
    out << ": how far the collective order alone moves the sharded values\n"
        << "(max ulp and normwise relative change against '" << reduce_order_name(s.orders.front())
        << "')\n";
    std::snprintf(line, sizeof line, "%4s  %-28s %12s %12s %12s %12s\n", "id", "tensor",
                  "f32 max_ulp", "f32 normwise", "f64 max_ulp", "f64 normwise");
    out << line;
    for (const OrderSweepRow& row : s.rows) {
      std::snprintf(line, sizeof line, "%4d  %-28s %12s %12s %12s %12s\n", row.id,
                    row.tensor.substr(0, 28).c_str(), ulp_cell(row.spread_ulp[0]).c_str(),
                    cell(row.spread_rel[0]).c_str(), ulp_cell(row.spread_ulp[1]).c_str(),
                    cell(row.spread_rel[1]).c_str());
      out << line;
    }
  }
  return out.str();
}

std::string precision_diff_json(const PrecisionDiff& diff) {
  const std::size_t top = diff.levels.size() - 1;
  Json levels = Json::array();
  for (std::size_t l = 0; l < diff.levels.size(); ++l) {
    levels.push_back(Json{{"precision", diff.levels[l].name()},
                          {"significand_bits", diff.significand_bits[l]}});
  }
  Json boundaries = Json::array();
  for (const BoundaryDiff& b : diff.boundaries) {
    const TraceEntry& e = b.entry;
    Json per_level = Json::array();
    for (std::size_t l = 0; l < diff.levels.size(); ++l) {
      const LevelMetrics& err = b.error[l];
      const LevelGap& gap = b.gap[l];
      per_level.push_back(Json{
          {"precision", diff.levels[l].name()},
          {"error_vs_top", Json{{"max_abs", magnitude_json(err.max_abs)},
                                {"max_rel", magnitude_json(err.max_rel)},
                                {"max_ulp", json_metric(err.max_ulp)}}},
          {"gap", Json{{"status", status_name(gap.status)},
                       {"max_abs", magnitude_json(gap.max_abs)},
                       {"max_rel", magnitude_json(gap.max_rel)},
                       {"max_ulp", json_metric(gap.max_ulp)},
                       {"normwise", magnitude_json(gap.normwise)},
                       {"log2_normwise", json_metric(gap.normwise.log2())}}}});
    }
    boundaries.push_back(Json{{"id", e.id},
                              {"step", e.step},
                              {"chunk", e.chunk},
                              {"kind", boundary_kind_name(e.kind)},
                              {"op", e.op},
                              {"tensor", e.tensor},
                              {"global_shape", shape_json(e.global)},
                              {"placement", e.layout.str()},
                              {"exact_claimed", e.exact},
                              {"verdict", verdict_name(b.verdict)},
                              {"why", b.why},
                              {"trend", trend_json(diff, b)},
                              {"levels", per_level}});
  }
  Json sweep = nullptr;
  if (diff.sweep) {
    const OrderSweep& s = *diff.sweep;
    Json orders = Json::array();
    for (ReduceOrder o : s.orders) orders.push_back(reduce_order_name(o));
    Json rows = Json::array();
    for (const OrderSweepRow& row : s.rows) {
      Json item{{"id", row.id}, {"tensor", row.tensor}};
      for (std::size_t p = 0; p < s.precisions.size(); ++p) {
        Json gaps = Json::object();
        for (std::size_t o = 0; o < s.orders.size(); ++o) {
          gaps[std::string(reduce_order_name(s.orders[o]))] = json_metric(row.gap[p][o]);
        }
        item[s.precisions[p].name()] = Json{{"spread_max_ulp", json_metric(row.spread_ulp[p])},
                                            {"spread_normwise", json_metric(row.spread_rel[p])},
                                            {"gap_normwise_by_order", gaps}};
      }
      rows.push_back(std::move(item));
    }
    Json precisions = Json::array();
    for (const Precision& p : s.precisions) precisions.push_back(p.name());
    sweep = Json{{"orders", orders}, {"precisions", precisions}, {"boundaries", rows}};
  }
  Json root{{"scenario", diff.scenario},
            {"shardsim_version", kShardsimVersion},
            {"levels", levels},
            {"top", diff.levels[top].name()},
            {"reduce_order", reduce_order_name(diff.reduce_order)},
            {"trend_rule", Json{{"min_levels", kMinTrendLevels},
                                {"noise_slope_max", kNoiseSlopeMax},
                                {"ill_conditioned_log2", kIllConditionedLog2}}},
            {"boundaries", boundaries},
            {"reduce_order_sweep", sweep}};
  return root.dump(2) + "\n";
}

}  // namespace shardsim
