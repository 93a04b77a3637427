// The op table: one entry per row of SHARDSIM_OP_LIST, in OpKind order. The entries themselves
// are defined next to their rules in sim/scenario/ops/*.cpp.
#include <cmath>
#include <cstdio>

#include "scenario/op_entry.hpp"

namespace shardsim {

namespace {

const std::vector<OpEntry>& op_table() {
  static const std::vector<OpEntry> table = {
#define SHARDSIM_OP_ENTRY(name, Type) op_entry<OpKind::name>(),
      SHARDSIM_OP_LIST(SHARDSIM_OP_ENTRY)
#undef SHARDSIM_OP_ENTRY
  };
  return table;
}

std::string bound_text(double value) {
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", value);
  return text;
}

}  // namespace

const OpEntry& find_op_entry(OpKind kind) {
  const OpEntry& entry = op_table()[static_cast<std::size_t>(kind)];
  SHARDSIM_ASSERT(entry.schema.kind == kind, "the op table follows SHARDSIM_OP_LIST's order");
  return entry;
}

std::vector<ResolvedParam> resolved_params(const StepSpec& step, const Scenario& scenario) {
  return find_op_entry(step.kind).resolve(step, scenario);
}

const std::vector<OpSchema>& op_schemas() {
  static const std::vector<OpSchema> schemas = [] {
    std::vector<OpSchema> out;
    for (const OpEntry& entry : op_table()) out.push_back(entry.schema);
    return out;
  }();
  return schemas;
}

bool ParamBounds::contains(double value) const {
  if (!std::isfinite(value)) return false;
  if (low_open ? !(value > low) : !(value >= low)) return false;
  if (high_open ? !(value < high) : !(value <= high)) return false;
  return true;
}

std::string ParamBounds::str() const {
  const bool has_low = std::isfinite(low);
  const bool has_high = std::isfinite(high);
  if (!has_low && !has_high) return "";
  if (!has_high) return (low_open ? "> " : ">= ") + bound_text(low);
  if (!has_low) return (high_open ? "< " : "<= ") + bound_text(high);
  return std::string(low_open ? "(" : "[") + bound_text(low) + ", " + bound_text(high) +
         (high_open ? ")" : "]");
}

}  // namespace shardsim
