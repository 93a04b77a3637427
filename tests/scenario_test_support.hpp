// The loader tests' view of a refused scenario text.
#pragma once

#include <string>

#include "core/error.hpp"
#include "scenario/scenario.hpp"

namespace scenario_test {

// The located message parse_scenario(text, file) throws, or "" when the text loads.
inline std::string load_error(const std::string& text, const std::string& file = "s.toml") {
  try {
    shardsim::parse_scenario(text, file);
  } catch (const shardsim::InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace scenario_test
