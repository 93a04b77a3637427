// The self-contained HTML report of shardsim precision: inline CSS and SVG only (no scripts, no
// fonts, no network), so it opens anywhere and can be archived as one file.
//   - a verdict table per boundary (the terminal table's content);
//   - per boundary, a plot of error vs precision level (log10 scale): each level's max relative
//     error against the top level, and the sharded-vs-dense gap (normwise);
//   - heatmaps of |sharded - dense| over (token, hidden) for a chosen boundary, one per level,
//     with the rank-shard edges drawn as black lines, so an off-by-one at a shard edge shows as a
//     bright band next to a line;
//   - the reduce-order sweep, when it ran.
#pragma once

#include <string>
#include <vector>

#include "shardsim/precision/precision_diff.hpp"

namespace shardsim {

std::string precision_html(const PrecisionDiff& diff, const std::vector<Heatmap>& heatmaps);

}  // namespace shardsim
