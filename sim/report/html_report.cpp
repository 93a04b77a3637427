#include "shardsim/report/html_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "shardsim/report/report.hpp"

namespace shardsim {

namespace {

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string sci(double v) {
  if (v == 0) return "0";
  if (std::isinf(v)) return "inf";
  if (std::isnan(v)) return "nan";
  return fmt("%.2e", v);
}

// A five-stop sequential scale (light yellow -> dark purple) at t in [0, 1].
std::string color(double t) {
  static const int stops[5][3] = {{255, 247, 188}, {254, 196, 79}, {236, 112, 20}, {179, 39, 64}, {73, 0, 106}};
  t = std::clamp(t, 0.0, 1.0) * 4;
  const int i = std::min(3, static_cast<int>(t));
  const double f = t - i;
  char buf[8];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x",
                static_cast<int>(std::lround(stops[i][0] + f * (stops[i + 1][0] - stops[i][0]))),
                static_cast<int>(std::lround(stops[i][1] + f * (stops[i + 1][1] - stops[i][1]))),
                static_cast<int>(std::lround(stops[i][2] + f * (stops[i + 1][2] - stops[i][2]))));
  return buf;
}

// One small chart: x = levels, y = log10(value); zeros are hollow markers on the floor.
std::string level_plot(const PrecisionDiff& diff, const BoundaryDiff& b, double floor_log) {
  const double width = 300, height = 170, left = 44, right = 28, top = 22, bottom = 30;
  const std::size_t n = diff.levels.size();
  auto x = [&](std::size_t l) {
    return n == 1 ? left + (width - left - right) / 2
                  : left + (width - left - right) * static_cast<double>(l) / static_cast<double>(n - 1);
  };
  auto y = [&](double v) {
    const double lg = v > 0 && std::isfinite(v) ? std::max(floor_log, std::log10(v)) : (v > 0 ? 0.0 : floor_log);
    return top + (height - top - bottom) * (lg / floor_log);
  };
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" role=\"img\"><rect width=\"100%\" height=\"100%\" fill=\"#fff\" stroke=\"#ccc\"/>"
      << "<text x=\"6\" y=\"15\" class=\"t\">#" << b.entry.id << " " << escape(b.entry.tensor)
      << " (" << escape(b.verdict) << ")</text>";
  for (int tick = 0; tick >= static_cast<int>(floor_log); tick -= std::max(1, static_cast<int>(-floor_log) / 4)) {
    const double ty = top + (height - top - bottom) * (tick / floor_log);
    svg << "<line x1=\"" << left << "\" x2=\"" << width - right << "\" y1=\"" << fmt("%.1f", ty)
        << "\" y2=\"" << fmt("%.1f", ty) << "\" stroke=\"#eee\"/><text x=\"4\" y=\""
        << fmt("%.1f", ty + 4) << "\" class=\"a\">1e" << tick << "</text>";
  }
  for (std::size_t l = 0; l < n; ++l) {
    svg << "<text x=\"" << fmt("%.1f", x(l) - 14) << "\" y=\"" << height - 10 << "\" class=\"a\">"
        << diff.levels[l].name() << "</text>";
  }
  struct Series {
    const char* stroke;
    std::vector<double> values;
  };
  Series error{"#2b6cb0", {}}, gap{"#c53030", {}};
  for (std::size_t l = 0; l < n; ++l) {
    error.values.push_back(b.error[l].max_rel);
    gap.values.push_back(b.gap[l].normwise);
  }
  for (const Series* s : {&error, &gap}) {
    svg << "<polyline fill=\"none\" stroke=\"" << s->stroke << "\" stroke-width=\"1.5\" points=\"";
    for (std::size_t l = 0; l < n; ++l) svg << fmt("%.1f", x(l)) << "," << fmt("%.1f", y(s->values[l])) << " ";
    svg << "\"/>";
    for (std::size_t l = 0; l < n; ++l) {
      const bool zero = !(s->values[l] > 0);
      svg << "<circle cx=\"" << fmt("%.1f", x(l)) << "\" cy=\"" << fmt("%.1f", y(s->values[l]))
          << "\" r=\"3\" fill=\"" << (zero ? "#fff" : s->stroke) << "\" stroke=\"" << s->stroke
          << "\"><title>" << diff.levels[l].name() << ": " << sci(s->values[l]) << "</title></circle>";
    }
  }
  svg << "</svg>";
  return svg.str();
}

std::string heatmap_svg(const Heatmap& map) {
  constexpr std::int64_t kMaxCells = 262144;
  const std::int64_t rows = map.columns == 0 ? 0 : std::min(map.rows, std::max<std::int64_t>(1, kMaxCells / map.columns));
  const double cell = std::clamp(760.0 / static_cast<double>(std::max<std::int64_t>(1, map.columns)), 2.0, 18.0);
  const double cell_h = std::clamp(cell, 2.0, 12.0);
  const double left = 130, top = 10;
  const double width = left + cell * static_cast<double>(map.columns) + 10;
  const double height = top + cell_h * static_cast<double>(rows) + 30;
  double lo = INFINITY, hi = 0;
  for (std::int64_t i = 0; i < rows * map.columns; ++i) {
    const double v = map.values[static_cast<std::size_t>(i)];
    if (v > 0 && std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  }
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << fmt("%.0f", width) << "\" height=\""
      << fmt("%.0f", height) << "\" role=\"img\">";
  for (std::int64_t r = 0; r < rows; ++r) {
    const double ry = top + cell_h * static_cast<double>(r);
    if (cell_h >= 8 || r % 8 == 0) {
      svg << "<text x=\"4\" y=\"" << fmt("%.1f", ry + cell_h - 1) << "\" class=\"a\">"
          << escape(map.row_labels[static_cast<std::size_t>(r)]) << "</text>";
    }
    for (std::int64_t c = 0; c < map.columns; ++c) {
      const double v = map.values[static_cast<std::size_t>(r * map.columns + c)];
      std::string fill;
      if (std::isnan(v)) {
        fill = "#dddddd";
      } else if (v == 0) {
        fill = "#ffffff";
      } else if (!std::isfinite(v) || hi == lo) {
        fill = color(1.0);
      } else {
        fill = color((std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo)));
      }
      svg << "<rect x=\"" << fmt("%.1f", left + cell * static_cast<double>(c)) << "\" y=\""
          << fmt("%.1f", ry) << "\" width=\"" << fmt("%.1f", cell) << "\" height=\""
          << fmt("%.1f", cell_h) << "\" fill=\"" << fill << "\"><title>"
          << escape(map.row_labels[static_cast<std::size_t>(r)]) << " " << escape(map.column_axis)
          << "=" << c << ": " << sci(v) << "</title></rect>";
    }
  }
  const double x0 = left, x1 = left + cell * static_cast<double>(map.columns);
  const double y0 = top, y1 = top + cell_h * static_cast<double>(rows);
  svg << "<rect x=\"" << fmt("%.1f", x0) << "\" y=\"" << fmt("%.1f", y0) << "\" width=\""
      << fmt("%.1f", x1 - x0) << "\" height=\"" << fmt("%.1f", y1 - y0)
      << "\" fill=\"none\" stroke=\"#888\"/>";
  for (std::int64_t r : map.row_edges) {
    if (r >= rows) continue;
    const double ey = top + cell_h * static_cast<double>(r);
    svg << "<line class=\"edge\" x1=\"" << fmt("%.1f", x0) << "\" x2=\"" << fmt("%.1f", x1)
        << "\" y1=\"" << fmt("%.1f", ey) << "\" y2=\"" << fmt("%.1f", ey) << "\"/>";
  }
  for (std::int64_t c : map.column_edges) {
    const double ex = left + cell * static_cast<double>(c);
    svg << "<line class=\"edge\" x1=\"" << fmt("%.1f", ex) << "\" x2=\"" << fmt("%.1f", ex)
        << "\" y1=\"" << fmt("%.1f", y0) << "\" y2=\"" << fmt("%.1f", y1) << "\"/>";
  }
  svg << "<text x=\"" << fmt("%.1f", left) << "\" y=\"" << fmt("%.1f", y1 + 18) << "\" class=\"a\">"
      << escape(map.column_axis) << " &#8594; (rows: " << escape(map.row_axes) << ")</text></svg>";
  std::ostringstream out;
  out << "<h3>#" << map.boundary << " " << escape(map.tensor) << " at " << escape(map.level) << " — "
      << escape(map.placement) << "</h3><p class=\"note\">|sharded - dense|: white = 0, grey = not "
      << "compared, color from " << sci(std::isfinite(lo) ? lo : 0) << " (light) to " << sci(hi)
      << " (dark), log scale; black lines are rank-shard edges.";
  if (rows < map.rows) out << " Only the first " << rows << " of " << map.rows << " rows are drawn.";
  out << "</p>" << svg.str();
  return out.str();
}

}  // namespace

std::string precision_html(const PrecisionDiff& diff, const std::vector<Heatmap>& heatmaps) {
  std::ostringstream out;
  const std::size_t top = diff.levels.size() - 1;
  out << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>shardsim precision: "
      << escape(diff.scenario) << "</title><style>"
      << "body{font-family:sans-serif;margin:20px;color:#222}table{border-collapse:collapse;font-size:13px}"
      << "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}th{background:#f3f3f3}"
      << "td.l{text-align:left}.t{font-size:12px;font-family:sans-serif}.a{font-size:10px;"
      << "font-family:sans-serif;fill:#555}.edge{stroke:#000;stroke-width:2}.note{font-size:13px;"
      << "color:#555}.bug{color:#c53030;font-weight:bold}.noise{color:#2f855a}.plots svg{margin:4px}"
      << "</style></head><body>\n<h1>shardsim precision: " << escape(diff.scenario) << "</h1>\n<p>levels";
  for (const Precision& p : diff.levels) out << " " << p.name();
  out << " (top " << diff.levels[top].name() << "), reduce order " << reduce_order_name(diff.reduce_order)
      << ", shardsim " << kShardsimVersion << ". A gap is <b>noise</b> when it shrinks with precision to at "
      << "most 2^-(bits-16) normwise at the top level, and a <b>bug</b> when it persists.</p>\n";
  out << "<h2>Verdicts</h2>\n<table><tr><th>id</th><th>step</th><th>chunk</th><th>op</th><th>tensor</th>"
      << "<th>placement</th>";
  for (const Precision& p : diff.levels) out << "<th>gap " << p.name() << "</th>";
  out << "<th>verdict</th></tr>\n";
  for (const BoundaryDiff& b : diff.boundaries) {
    out << "<tr><td>" << b.entry.id << "</td><td>" << b.entry.step << "</td><td>" << b.entry.chunk
        << "</td><td class=\"l\">" << escape(b.entry.op) << "</td><td class=\"l\">"
        << escape(b.entry.tensor) << "</td><td class=\"l\">" << escape(b.entry.layout.str())
        << "</td>";
    for (const LevelGap& g : b.gap) out << "<td>" << sci(g.normwise) << "</td>";
    out << "<td class=\"l " << (b.verdict == "bug" ? "bug" : b.verdict == "noise" ? "noise" : "") << "\" title=\""
        << escape(b.why) << "\">" << escape(b.verdict) << "</td></tr>\n";
  }
  out << "</table>\n<h2>Error vs precision level</h2>\n<p class=\"note\">Blue: max relative error of the "
      << "oracle against the top level (rounded to each level's type). Red: sharded-vs-dense gap "
      << "(normwise). Hollow markers on the floor are exact zeros.</p>\n<div class=\"plots\">";
  double min_log = -1;
  for (const BoundaryDiff& b : diff.boundaries) {
    for (std::size_t l = 0; l < diff.levels.size(); ++l) {
      for (double v : {b.error[l].max_rel, b.gap[l].normwise}) {
        if (v > 0 && std::isfinite(v)) min_log = std::min(min_log, std::floor(std::log10(v)) - 1);
      }
    }
  }
  for (const BoundaryDiff& b : diff.boundaries) out << level_plot(diff, b, std::max(min_log, -400.0));
  out << "</div>\n<h2>Heatmaps</h2>\n";
  if (heatmaps.empty()) out << "<p class=\"note\">No boundary has a sharded-vs-dense gap; no heatmap.</p>\n";
  for (const Heatmap& map : heatmaps) out << heatmap_svg(map) << "\n";
  if (diff.sweep) {
    const OrderSweep& s = *diff.sweep;
    out << "<h2>Reduce-order sweep</h2>\n<p class=\"note\">How far the collective reduce order alone "
        << "moves the sharded values, against '" << reduce_order_name(s.orders.front())
        << "'.</p>\n<table><tr><th>id</th><th>tensor</th>";
    for (const Precision& p : s.precisions) out << "<th>" << p.name() << " max ulp</th><th>" << p.name() << " normwise</th>";
    out << "</tr>\n";
    for (const OrderSweepRow& row : s.rows) {
      out << "<tr><td>" << row.id << "</td><td class=\"l\">" << escape(row.tensor) << "</td>";
      for (std::size_t p = 0; p < s.precisions.size(); ++p) {
        out << "<td>" << sci(row.spread_ulp[p]) << "</td><td>" << sci(row.spread_rel[p]) << "</td>";
      }
      out << "</tr>\n";
    }
    out << "</table>\n";
  }
  out << "</body></html>\n";
  return out.str();
}

}  // namespace shardsim
