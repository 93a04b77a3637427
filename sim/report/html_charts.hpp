// Private to html_report.cpp: the SVG pieces of the precision HTML report (inline, no scripts).
#pragma once

#include <string>

#include "precision/precision_diff.hpp"

namespace shardsim::html {

std::string escape(const std::string& text);
std::string fmt(const char* format, double v);

// log10 of a positive finite magnitude, at any exponent.
double log10_of(const Magnitude& v);

// The y range of the level charts, in decades: lo < hi, integers. It covers every positive
// finite value plotted (each level's error against the top and its normwise gap, of every
// boundary) with one decade to spare below, where exact zeros sit.
struct LogRange {
  double lo = -1;
  double hi = 0;
};
LogRange chart_range(const PrecisionDiff& diff);

// One boundary's chart: x = levels, y = log10 of the error vs top (blue) and of the normwise gap
// (red), the fitted trend of the gap (dashed) and its slope in the subtitle. The svg carries
// data-ymin / data-ymax: the decades its axis spans.
std::string level_chart(const PrecisionDiff& diff, const BoundaryDiff& b, const LogRange& range);

// The heatmap of |sharded - dense| of one boundary at one level, with its heading and note.
std::string heatmap_svg(const Heatmap& map);

}  // namespace shardsim::html
