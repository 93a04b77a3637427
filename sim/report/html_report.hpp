// The self-contained HTML report of shardsim precision: inline CSS and SVG only (no scripts, no
// fonts, no network), so it opens anywhere and can be archived as one file.
//   - first, the boundary it opens on (`opened`: the first divergent one by default, see
//     first_divergent_boundary): its verdict and why, its chart and `heatmaps`, the heatmaps of
//     |sharded - dense| over (token, hidden) for that boundary, one per level, with the
//     rank-shard edges drawn as black lines, so an off-by-one at a shard edge shows as a bright
//     band next to a line;
//   - a verdict table per boundary (gaps, fitted slope, log2 condition, verdict);
//   - per boundary, a chart of error vs precision level (log10 scale, one axis range for all,
//     covering every value plotted): each level's max relative error against the top level, the
//     sharded-vs-dense gap (normwise), the fitted trend and its slope;
//   - the reduce-order sweep, when it ran.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "precision/precision_diff.hpp"

namespace shardsim {

// REQUIRES: opened < diff.boundaries.size() when given.
std::string precision_html(const PrecisionDiff& diff, std::optional<std::size_t> opened,
                           const std::vector<Heatmap>& heatmaps);

}  // namespace shardsim
