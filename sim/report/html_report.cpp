#include "report/html_report.hpp"

#include <sstream>

#include "report/report.hpp"
#include "report/html_charts.hpp"

namespace shardsim {

namespace {

using html::escape;

std::string css_class(Verdict verdict) {
  switch (verdict) {
    case Verdict::bug: return "bug";
    case Verdict::ill_conditioned_noise: return "ill";
    case Verdict::noise: return "noise";
    default: return "";
  }
}

void page_head(std::ostringstream& out, const PrecisionDiff& diff) {
  out << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>shardsim precision: "
      << escape(diff.scenario) << "</title><style>"
      << "body{font-family:sans-serif;margin:20px;color:#222}table{border-collapse:collapse;font-size:13px}"
      << "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}th{background:#f3f3f3}"
      << "td.l{text-align:left}.t{font-size:12px;font-family:sans-serif}.a{font-size:10px;"
      << "font-family:sans-serif;fill:#555}.edge{stroke:#000;stroke-width:2}.note{font-size:13px;"
      << "color:#555}.bug{color:#c53030;font-weight:bold}.ill{color:#b7791f;font-weight:bold}"
      << ".noise{color:#2f855a}.plots svg{margin:4px}tr.opened td{background:#fff5d6}"
      << "#opened{border:2px solid #b7791f;padding:4px 12px;margin:12px 0}"
      << "</style></head><body>\n<h1>shardsim precision: " << escape(diff.scenario) << "</h1>\n<p>levels";
  for (std::size_t l = 0; l < diff.levels.size(); ++l) {
    out << " " << diff.levels[l].name() << " (" << diff.significand_bits[l] << " bits)";
  }
  out << ", reduce order " << reduce_order_name(diff.reduce_order) << ", shardsim " << kShardsimVersion
      << ". The verdict reads the trend of the normwise gap along the ladder: a least-squares fit of "
      << "log2(gap) against the significand bits. Rounding <b>noise</b> falls one bit per bit (slope "
      << "-1; slope &le; " << html::fmt("%.1f", kNoiseSlopeMax) << " counts), <b>ill-conditioned "
      << "noise</b> is noise whose condition gap/(2^-bits&middot;max|dense|) exceeds 2^"
      << html::fmt("%.0f", kIllConditionedLog2) << ", a <b>bug</b>'s gap stays flat. Fewer than "
      << kMinTrendLevels << " levels: <b>undetermined</b>.</p>\n";
}

// The boundary the report opens on: its verdict, its chart and its heatmaps, first on the page.
void opened_section(std::ostringstream& out, const PrecisionDiff& diff, std::optional<std::size_t> opened,
                    const std::vector<Heatmap>& heatmaps, const html::LogRange& range) {
  if (!opened) {
    out << "<p class=\"note\">No boundary has a sharded-vs-dense gap at any level; no heatmap.</p>\n";
    return;
  }
  const BoundaryDiff& b = diff.boundaries[*opened];
  out << "<section id=\"opened\" data-boundary=\"" << b.entry.id << "\"><h2>#" << b.entry.id << " "
      << escape(b.entry.tensor) << " (step " << b.entry.step << ", chunk " << b.entry.chunk << ", "
      << escape(b.entry.op) << "): <span class=\"" << css_class(b.verdict) << "\">"
      << verdict_name(b.verdict) << "</span></h2>\n<p>" << escape(b.why) << "</p>\n"
      << html::level_chart(diff, b, range) << "\n";
  for (const Heatmap& map : heatmaps) out << html::heatmap_svg(map) << "\n";
  out << "</section>\n";
}

void verdict_table(std::ostringstream& out, const PrecisionDiff& diff, std::optional<std::size_t> opened) {
  out << "<h2>Verdicts</h2>\n<table><tr><th>id</th><th>step</th><th>chunk</th><th>op</th><th>tensor</th>"
      << "<th>placement</th>";
  for (const Precision& p : diff.levels) out << "<th>gap " << p.name() << "</th>";
  out << "<th>slope</th><th>log2 condition</th><th>verdict</th></tr>\n";
  for (std::size_t i = 0; i < diff.boundaries.size(); ++i) {
    const BoundaryDiff& b = diff.boundaries[i];
    out << "<tr" << (opened == i ? " class=\"opened\"" : "") << "><td>" << b.entry.id << "</td><td>"
        << b.entry.step << "</td><td>" << b.entry.chunk << "</td><td class=\"l\">" << escape(b.entry.op)
        << "</td><td class=\"l\">" << escape(b.entry.tensor) << "</td><td class=\"l\">"
        << escape(b.entry.layout.str()) << "</td>";
    for (const LevelGap& g : b.gap) out << "<td>" << g.normwise.sci() << "</td>";
    out << "<td>" << (b.trend.slope ? html::fmt("%.2f", *b.trend.slope) : "") << "</td><td>"
        << (b.trend.condition_level ? html::fmt("%.1f", b.trend.log2_condition) : "") << "</td>"
        << "<td class=\"l " << css_class(b.verdict) << "\" title=\"" << escape(b.why) << "\">"
        << verdict_name(b.verdict) << "</td></tr>\n";
  }
  out << "</table>\n";
}

void sweep_table(std::ostringstream& out, const OrderSweep& s) {
  out << "<h2>Reduce-order sweep</h2>\n<p class=\"note\">How far the collective reduce order alone "
      << "moves the sharded values, against '" << reduce_order_name(s.orders.front())
      << "'.</p>\n<table><tr><th>id</th><th>tensor</th>";
  for (const Precision& p : s.precisions) out << "<th>" << p.name() << " max ulp</th><th>" << p.name() << " normwise</th>";
  out << "</tr>\n";
  for (const OrderSweepRow& row : s.rows) {
    out << "<tr><td>" << row.id << "</td><td class=\"l\">" << escape(row.tensor) << "</td>";
    for (std::size_t p = 0; p < s.precisions.size(); ++p) {
      out << "<td>" << Magnitude::of(row.spread_ulp[p]).sci() << "</td><td>"
          << Magnitude::of(row.spread_rel[p]).sci() << "</td>";
    }
    out << "</tr>\n";
  }
  out << "</table>\n";
}

}  // namespace

std::string precision_html(const PrecisionDiff& diff, std::optional<std::size_t> opened,
                           const std::vector<Heatmap>& heatmaps) {
  std::ostringstream out;
  const html::LogRange range = html::chart_range(diff);
  page_head(out, diff);
  opened_section(out, diff, opened, heatmaps, range);
  verdict_table(out, diff, opened);
  out << "<h2>Gap vs precision level</h2>\n<p class=\"note\">Blue: max relative error of the "
      << "oracle against the top level (rounded to each level's type). Red: sharded-vs-dense gap "
      << "(normwise). Dashed: the fitted trend of the gap. Hollow markers on the floor are exact "
      << "zeros; the axis spans 1e" << html::fmt("%.0f", range.lo) << " to 1e" << html::fmt("%.0f", range.hi)
      << ", every value plotted.</p>\n<div class=\"plots\">";
  for (const BoundaryDiff& b : diff.boundaries) out << html::level_chart(diff, b, range);
  out << "</div>\n";
  if (diff.sweep) sweep_table(out, *diff.sweep);
  out << "</body></html>\n";
  return out.str();
}

}  // namespace shardsim
