// The SVG pieces of the precision HTML report (html_charts.hpp).
#include "report/html_charts.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace shardsim::html {

namespace {

constexpr double kLog10Of2 = 0.30102999566398119521;
constexpr double kCharWidth = 6.0;  // an upper bound of a character's width at the 10px font

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

bool plotted(const Magnitude& v) { return v.is_finite() && !v.is_zero(); }

// A tick step in decades (1, 2, 5, 10, 20, 50, ...) giving at most six ticks over `span`.
int tick_step(double span) {
  for (int scale = 1;; scale *= 10) {
    for (int m : {1, 2, 5}) {
      if (span / (m * scale) <= 5) return m * scale;
    }
  }
}

// The chart's subtitle: the fitted slope and the condition estimate.
std::string trend_note(const PrecisionDiff& diff, const BoundaryDiff& b) {
  const TrendFit& t = b.trend;
  if (b.verdict == Verdict::exact || b.verdict == Verdict::not_applicable) return "no gap";
  std::string note = t.slope ? "slope " + fmt("%.2f", *t.slope) + "/bit" : "no slope (one level with a gap)";
  if (t.condition_level) {
    note += ", condition 2^" + fmt("%.1f", t.log2_condition) + " at " + diff.levels[*t.condition_level].name();
  }
  return note;
}

}  // namespace

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

double log10_of(const Magnitude& v) { return v.log2() * kLog10Of2; }

LogRange chart_range(const PrecisionDiff& diff) {
  double lo = INFINITY, hi = -INFINITY;
  for (const BoundaryDiff& b : diff.boundaries) {
    for (std::size_t l = 0; l < diff.levels.size(); ++l) {
      for (const Magnitude& v : {b.error[l].max_rel, b.gap[l].normwise}) {
        if (!plotted(v)) continue;
        lo = std::min(lo, log10_of(v));
        hi = std::max(hi, log10_of(v));
      }
    }
  }
  if (!std::isfinite(lo)) return {};
  LogRange range{std::floor(lo) - 1, std::max(0.0, std::ceil(hi))};
  return range;
}

std::string level_chart(const PrecisionDiff& diff, const BoundaryDiff& b, const LogRange& range) {
  const double width = 320, height = 190, left = 52, right = 28, top = 36, bottom = 30;
  const std::size_t n = diff.levels.size();
  auto x = [&](std::size_t l) {
    return n == 1 ? left + (width - left - right) / 2
                  : left + (width - left - right) * static_cast<double>(l) / static_cast<double>(n - 1);
  };
  // Decade d sits at top + (hi - d) / (hi - lo) of the plot height; zeros on the floor,
  // infinities on the ceiling.
  auto y_of_log = [&](double lg) {
    return top + (height - top - bottom) * (range.hi - std::clamp(lg, range.lo, range.hi)) / (range.hi - range.lo);
  };
  auto y = [&](const Magnitude& v) {
    return y_of_log(v.is_zero() ? range.lo : v.is_finite() ? log10_of(v) : range.hi);
  };
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" role=\"img\" data-boundary=\"" << b.entry.id << "\" data-ymin=\"" << range.lo
      << "\" data-ymax=\"" << range.hi << "\"><rect width=\"100%\" height=\"100%\" fill=\"#fff\" "
      << "stroke=\"#ccc\"/><text x=\"6\" y=\"14\" class=\"t\">#" << b.entry.id << " "
      << escape(b.entry.tensor) << " (" << verdict_name(b.verdict) << ")</text><text x=\"6\" y=\"28\" "
      << "class=\"a slope\">" << escape(trend_note(diff, b)) << "</text>";
  const int step = tick_step(range.hi - range.lo);
  for (double tick = std::floor(range.hi / step) * step; tick >= range.lo; tick -= step) {
    const double ty = y_of_log(tick);
    svg << "<line x1=\"" << left << "\" x2=\"" << width - right << "\" y1=\"" << fmt("%.1f", ty)
        << "\" y2=\"" << fmt("%.1f", ty) << "\" stroke=\"#eee\"/><text x=\"4\" y=\""
        << fmt("%.1f", ty + 4) << "\" class=\"a\">1e" << fmt("%.0f", tick) << "</text>";
  }
  for (std::size_t l = 0; l < n; ++l) {
    svg << "<text x=\"" << fmt("%.1f", x(l) - 14) << "\" y=\"" << height - 10 << "\" class=\"a\">"
        << diff.levels[l].name() << "</text>";
  }
  if (b.trend.slope) {  // the fitted gap at each fitted level, log2 g = intercept + slope * bits
    svg << "<polyline class=\"fit\" fill=\"none\" stroke=\"#888\" stroke-dasharray=\"4 3\" points=\"";
    for (std::size_t l = b.trend.fitted.front(); l <= b.trend.fitted.back(); ++l) {
      const double log2_fit = *b.trend.intercept + *b.trend.slope * diff.significand_bits[l];
      svg << fmt("%.1f", x(l)) << "," << fmt("%.1f", y_of_log(log2_fit * kLog10Of2)) << " ";
    }
    svg << "\"/>";
  }
  for (const bool gap : {false, true}) {
    const char* stroke = gap ? "#c53030" : "#2b6cb0";
    auto value = [&](std::size_t l) { return gap ? b.gap[l].normwise : b.error[l].max_rel; };
    svg << "<polyline fill=\"none\" stroke=\"" << stroke << "\" stroke-width=\"1.5\" points=\"";
    for (std::size_t l = 0; l < n; ++l) svg << fmt("%.1f", x(l)) << "," << fmt("%.1f", y(value(l))) << " ";
    svg << "\"/>";
    for (std::size_t l = 0; l < n; ++l) {
      svg << "<circle cx=\"" << fmt("%.1f", x(l)) << "\" cy=\"" << fmt("%.1f", y(value(l)))
          << "\" r=\"3\" fill=\"" << (value(l).is_zero() ? "#fff" : stroke) << "\" stroke=\"" << stroke
          << "\"><title>" << diff.levels[l].name() << ": " << value(l).sci() << "</title></circle>";
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
  std::size_t label_chars = 0;
  for (const std::string& label : map.row_labels) label_chars = std::max(label_chars, label.size());
  const std::string axis_label = map.column_axis + " \u2192 (rows: " + map.row_axes + ")";
  const double left = 10 + kCharWidth * static_cast<double>(label_chars), top = 10;
  const double width = std::max(left + cell * static_cast<double>(map.columns),
                                left + kCharWidth * static_cast<double>(axis_label.size())) + 10;
  const double height = top + cell_h * static_cast<double>(rows) + 30;
  Magnitude lo = Magnitude::infinity(), hi;
  for (std::int64_t i = 0; i < rows * map.columns; ++i) {
    const Magnitude& v = map.values[static_cast<std::size_t>(i)];
    if (!plotted(v)) continue;
    if (v < lo) lo = v;
    hi = max(hi, v);
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
      const Magnitude& v = map.values[static_cast<std::size_t>(r * map.columns + c)];
      std::string fill;
      if (v.is_nan()) {
        fill = "#dddddd";
      } else if (v.is_zero()) {
        fill = "#ffffff";
      } else if (!v.is_finite() || hi == lo) {
        fill = color(1.0);
      } else {
        fill = color((v.log2() - lo.log2()) / (hi.log2() - lo.log2()));
      }
      svg << "<rect x=\"" << fmt("%.1f", left + cell * static_cast<double>(c)) << "\" y=\""
          << fmt("%.1f", ry) << "\" width=\"" << fmt("%.1f", cell) << "\" height=\""
          << fmt("%.1f", cell_h) << "\" fill=\"" << fill << "\"><title>"
          << escape(map.row_labels[static_cast<std::size_t>(r)]) << " " << escape(map.column_axis)
          << "=" << c << ": " << v.sci() << "</title></rect>";
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
      << escape(axis_label) << "</text></svg>";
  std::ostringstream out;
  out << "<h3>#" << map.boundary << " " << escape(map.tensor) << " at " << escape(map.level) << " — "
      << escape(map.placement) << "</h3><p class=\"note\">|sharded - dense|: white = 0, grey = not "
      << "compared, color from " << (lo.is_finite() ? lo : Magnitude()).sci() << " (light) to " << hi.sci()
      << " (dark), log scale; black lines are rank-shard edges.";
  if (rows < map.rows) out << " Only the first " << rows << " of " << map.rows << " rows are drawn.";
  out << "</p>" << svg.str();
  return out.str();
}

}  // namespace shardsim::html
