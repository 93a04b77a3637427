// shardsim precision's outputs: the terminal table (100 columns) and the JSON report (stable
// keys, docs/reports.md). The report layer writes them; precision/ computes the PrecisionDiff.
#pragma once

#include <string>

#include "precision/precision_diff.hpp"

namespace shardsim {

std::string format_precision_diff(const PrecisionDiff& diff);
std::string precision_diff_json(const PrecisionDiff& diff);

}  // namespace shardsim
