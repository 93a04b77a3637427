// check_expectation_names (scenario.hpp): the names [expect] gives must exist in the plan.
#include <algorithm>

#include "scenario/scenario.hpp"
#include "core/trace.hpp"
#include "scenario/loader_internal.hpp"

namespace shardsim {

namespace {

bool matches(const Expectation& e, const TraceEntry& b, bool with_tensor, bool with_op) {
  return (!e.step || *e.step == b.step) && (!e.chunk || *e.chunk == b.chunk) &&
         (!e.micro || *e.micro == b.micro) &&
         (!with_tensor || !e.tensor || *e.tensor == b.tensor) &&
         (!with_op || !e.op || *e.op == b.op);
}

[[noreturn]] void refuse(const Scenario& s, const std::string& key, const std::string& message) {
  const auto at = s.expect.keys.find(key);
  throw LocatedError(located(s.file, at != s.expect.keys.end() ? at->second : s.expect.loc,
                             key.empty() ? "expect" : "expect." + key, message));
}

// The tensor (or op) names of the boundaries at the expected step and chunk.
std::vector<std::string> names(const Scenario& s, const std::vector<TraceEntry>& trace,
                               bool tensors) {
  std::vector<std::string> out;
  for (const TraceEntry& b : trace) {
    if (!matches(s.expect, b, false, false)) continue;
    const std::string& name = tensors ? b.tensor : b.op;
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  }
  return out;
}

}  // namespace

void check_expectation_names(const Scenario& s, const std::vector<TraceEntry>& trace) {
  const Expectation& e = s.expect;
  if (std::any_of(trace.begin(), trace.end(),
                  [&](const TraceEntry& b) { return matches(e, b, true, true); })) {
    return;
  }
  const std::string where = std::string(e.step ? " at step " + std::to_string(*e.step) : "") +
                            (e.chunk ? " in chunk " + std::to_string(*e.chunk) : "") +
                            (e.micro ? " in micro-batch " + std::to_string(*e.micro) : "");
  // Blame the tensor, then the op, then their combination.
  for (const bool tensors : {true, false}) {
    const std::optional<std::string>& wanted = tensors ? e.tensor : e.op;
    if (!wanted) continue;
    const std::vector<std::string> known = names(s, trace, tensors);
    if (std::find(known.begin(), known.end(), *wanted) != known.end()) continue;
    const std::string hint = nearest(*wanted, known);
    refuse(s, tensors ? "tensor" : "op",
           std::string("no boundary of this scenario's plan") +
               (tensors ? " names tensor " : " has op ") + quote(*wanted) + where +
               (hint.empty() ? "" : " (did you mean " + quote(hint) + "?)") +
               "; 'shardsim explain' lists the boundaries");
  }
  refuse(s, "",
         "no boundary of this scenario's plan matches the expected first divergence" + where +
             (e.tensor && e.op ? " (tensor " + quote(*e.tensor) + " with op " + quote(*e.op) + ")"
                               : "") +
             "; 'shardsim explain' lists the boundaries");
}

}  // namespace shardsim
