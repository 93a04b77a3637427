// Private to the report: what an fsdp scenario adds (docs/layouts.md "Fully sharded data
// parallelism").
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "runner/runner.hpp"

namespace shardsim {

// The report's "fsdp" object: style, dim, units, and the gradient reduction with its reason.
nlohmann::ordered_json fsdp_json(const Scenario& scenario);

// The run table's parameter-memory lines, bytes per rank.
std::string format_parameter_memory(const ParameterMemory& memory);

}  // namespace shardsim
