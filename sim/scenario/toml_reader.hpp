// Private to the scenario loader: located access to a parsed TOML document. Every problem
// becomes one InputError "file:line:col: key.path: message".
#pragma once

#include <toml++/toml.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "scenario/loader_internal.hpp"

namespace shardsim {

// A number as a message quotes it: shortest round-trip form ("1.5", "inf", "nan").
inline std::string format_number(double x) {
  char text[32];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(text, sizeof text, "%.*g", digits, x);
    if (std::strtod(text, nullptr) == x || x != x) break;
  }
  return text;
}

// Where the loader's copies of nodes came from: toml++ does not copy a node's source region, so
// the nodes [blocks] expands (loader_blocks.cpp) are mapped to their originals' positions here,
// for the parse that made them (set by parse_scenario, on its thread).
using NodeOrigins = std::map<const toml::node*, SourceLoc>;
inline thread_local const NodeOrigins* node_origins = nullptr;

inline SourceLoc loc_of(const toml::node& node) {
  if (node.source().begin.line == 0 && node_origins) {
    if (const auto it = node_origins->find(&node); it != node_origins->end()) return it->second;
  }
  return {static_cast<int>(node.source().begin.line), static_cast<int>(node.source().begin.column)};
}

// Walks a parsed TOML document, turning every problem into a located InputError.

class TomlReader {
 public:
  explicit TomlReader(const std::string& file) : file_(file) {}

  [[noreturn]] void fail(const toml::node& node, const std::string& path,
                         const std::string& message) const {
    throw LocatedError(located(file_, loc_of(node), path, message));
  }
  [[noreturn]] void fail_at(SourceLoc loc, const std::string& path,
                            const std::string& message) const {
    throw LocatedError(located(file_, loc, path, message));
  }

  // Rejects keys outside `allowed`, suggesting the nearest one.
  void check_keys(const toml::table& table, const std::string& path,
                  const std::vector<std::string>& allowed) const {
    for (auto&& [key, node] : table) {
      const std::string name(key.str());
      if (std::find(allowed.begin(), allowed.end(), name) != allowed.end()) continue;
      const std::string hint = nearest(name, allowed);
      // A copied key has no position: its value's (the same line) stands in.
      const SourceLoc at = key.source().begin.line != 0
                               ? SourceLoc{static_cast<int>(key.source().begin.line),
                                           static_cast<int>(key.source().begin.column)}
                               : loc_of(node);
      throw LocatedError(located(
          file_, at, path.empty() ? clipped(name) : path + "." + clipped(name),
          "unknown key " + quote(name) +
              (hint.empty() ? "" : " (did you mean " + quote(hint) + "?)")));
    }
  }

  std::string string(const toml::node& node, const std::string& path) const {
    if (!node.is_string()) fail(node, path, "expected a string, got " + type_name(node));
    return *node.value<std::string>();
  }
  std::int64_t integer(const toml::node& node, const std::string& path) const {
    if (!node.is_integer()) fail(node, path, "expected an integer, got " + type_name(node));
    return *node.value<std::int64_t>();
  }
  double number(const toml::node& node, const std::string& path) const {
    if (!node.is_number()) fail(node, path, "expected a number, got " + type_name(node));
    return *node.value<double>();
  }
  const toml::table& table(const toml::node& node, const std::string& path) const {
    if (!node.is_table()) fail(node, path, "expected a table, got " + type_name(node));
    return *node.as_table();
  }
  const toml::array& array(const toml::node& node, const std::string& path) const {
    if (!node.is_array()) fail(node, path, "expected an array, got " + type_name(node));
    return *node.as_array();
  }

  static std::string type_name(const toml::node& node) {
    switch (node.type()) {
      case toml::node_type::string:
        return "a string";
      case toml::node_type::integer:
        return "an integer";
      case toml::node_type::floating_point:
        return "a float";
      case toml::node_type::boolean:
        return "a boolean";
      case toml::node_type::array:
        return "an array";
      case toml::node_type::table:
        return "a table";
      default:
        return "a date/time";
    }
  }

  // Runs `parse`, relocating a bare InputError to `node` (a located one passes unchanged).
  template <typename F>
  auto wrap(const toml::node& node, const std::string& path, F parse) const {
    try {
      return parse();
    } catch (const LocatedError&) {
      throw;
    } catch (const InputError& e) {
      fail(node, path, e.what());
    }
  }

 protected:
  const std::string& file_;
};

}  // namespace shardsim
