// The scenario model's own methods, and the located-message helpers every loader file uses.
#include <algorithm>

#include "core/error.hpp"
#include "scenario/scenario.hpp"
#include "scenario/loader_internal.hpp"

namespace shardsim {

std::string_view role_name(TensorRole role) {
  switch (role) {
    case TensorRole::input:
      return "input";
    case TensorRole::parameter:
      return "parameter";
    case TensorRole::target:
      return "target";
  }
  return "?";
}

const std::string& StepSpec::str(const std::string& key) const {
  return std::get<std::string>(params.at(key).value);
}

const std::string& StepSpec::output() const { return str("output"); }

const TensorSpec* Scenario::find_tensor(std::string_view wanted) const {
  for (const TensorSpec& t : tensors) {
    if (t.name == wanted) return &t;
  }
  return nullptr;
}

const TensorSpec* Scenario::find_ids(std::string_view wanted) const {
  for (const TensorSpec& t : id_tensors) {
    if (t.name == wanted) return &t;
  }
  return nullptr;
}

bool Scenario::has_fault(Fault fault) const {
  return std::find(faults.begin(), faults.end(), fault) != faults.end();
}

std::optional<double> assumed_default_init(const Scenario& scenario, const std::string& name) {
  for (const StepSpec& step : scenario.steps) {
    if (step.has("weight") && step.str("weight") == name) return 1.0;
    if (step.has("bias") && step.str("bias") == name) return 0.0;
  }
  return std::nullopt;
}

std::vector<std::string> Scenario::fault_names() const {
  std::vector<std::string> names;
  for (Fault fault : faults) names.emplace_back(fault_name(fault));
  return names;
}

Magnitude exact_default_rtol(const Precision& precision) {
  if (!precision.has_exact_values()) return Magnitude::of(default_rtol(precision));
  return Magnitude::scaled(1.0, 16 - static_cast<long>(precision.bits));
}

// Under fsdp mixed precision every dtype narrower than the run (param_dtype, reduce_dtype) adds
// its rounding: the default is the larger of the run's and 2^(5 - bits) of each such dtype, the
// narrow rule (16 ulps of the dtype, scalar.hpp's default_rtol) applied to the dtype the values
// are stored or summed in (docs/layouts.md "Mixed precision").
Magnitude Scenario::rtol(const Precision& precision) const {
  auto it = tolerance.find(precision.name());
  if (it != tolerance.end()) return it->second;
  Magnitude rtol = exact_default_rtol(precision);
  if (!fsdp) return rtol;
  for (const std::optional<Precision>& dtype : {fsdp->param_dtype, fsdp->reduce_dtype}) {
    if (!dtype || dtype->bits >= precision.bits) continue;
    const Magnitude narrow = Magnitude::scaled(1.0, 5 - static_cast<long>(dtype->bits));
    if (rtol < narrow) rtol = narrow;
  }
  return rtol;
}

std::string located(const std::string& file, SourceLoc loc, const std::string& path,
                    const std::string& message) {
  std::string out = file;
  if (loc.line > 0) out += ":" + std::to_string(loc.line) + ":" + std::to_string(loc.column);
  out += ": ";
  if (!path.empty()) out += path + ": ";
  return out + message;
}

std::string nearest(std::string_view word, const std::vector<std::string>& candidates) {
  // Plausible: at most a third of the word changed (and at least one edit allowed).
  const std::size_t plausible = std::max<std::size_t>(1, word.size() / 3);
  std::string best;
  std::size_t best_distance = SIZE_MAX;
  for (const std::string& candidate : candidates) {
    // The distance is at least the difference in length: skip what cannot be plausible (a
    // megabyte-long key costs nothing).
    const std::size_t longer = std::max(word.size(), candidate.size());
    if (longer - std::min(word.size(), candidate.size()) > plausible) continue;
    // Optimal-string-alignment distance (Levenshtein plus adjacent transpositions, so the
    // common typo "esp" for "eps" is one edit), one row at a time.
    std::vector<std::size_t> before(candidate.size() + 1), prev(candidate.size() + 1),
        row(candidate.size() + 1);
    for (std::size_t j = 0; j <= candidate.size(); ++j) row[j] = j;
    for (std::size_t i = 1; i <= word.size(); ++i) {
      before.swap(prev);
      prev.swap(row);
      row[0] = i;
      for (std::size_t j = 1; j <= candidate.size(); ++j) {
        row[j] = std::min(
            {prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (word[i - 1] == candidate[j - 1] ? 0 : 1)});
        if (i > 1 && j > 1 && word[i - 1] == candidate[j - 2] && word[i - 2] == candidate[j - 1]) {
          row[j] = std::min(row[j], before[j - 2] + 1);
        }
      }
    }
    if (row[candidate.size()] < best_distance) {
      best_distance = row[candidate.size()];
      best = candidate;
    }
  }
  return best_distance <= plausible ? best : "";
}

const TensorState& StepContext::tensor(const StepSpec& step, const std::string& key) {
  const std::string& name = step.str(key);
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    std::vector<std::string> known;
    for (const auto& [defined, state] : tensors_) known.push_back(defined);
    std::string hint = nearest(name, known);
    fail(step, key,
         "tensor " + quote(name) + " is used before it is defined" +
             (hint.empty() ? std::string() : " (did you mean " + quote(hint) + "?)"));
  }
  if (it->second.ids) {
    fail(step, key,
         quote(name) + " is an i64 tensor (token ids or labels); " + std::string(step.op()) +
             " needs a floating tensor here");
  }
  return it->second;
}

const TensorState& StepContext::ids(const StepSpec& step, const std::string& key) {
  const std::string& name = step.str(key);
  auto it = tensors_.find(name);
  if (it == tensors_.end() || !it->second.ids) {
    std::vector<std::string> known;
    for (const auto& [defined, state] : tensors_) {
      if (state.ids) known.push_back(defined);
    }
    const std::string hint = nearest(name, known);
    fail(step, key,
         quote(name) + (it == tensors_.end() ? " is not a tensor of [[tensors]]"
                                             : " is a floating tensor") +
             "; " + key + " names an i64 tensor (dtype = \"i64\")" +
             (hint.empty() ? std::string() : " (did you mean " + quote(hint) + "?)"));
  }
  return it->second;
}

void StepContext::define(const StepSpec& step, const std::string& key, TensorState state) {
  const std::string& name = step.str(key);
  if (tensors_.count(name)) fail(step, key, "duplicate tensor name " + quote(name));
  if (const std::string problem = tensor_name_problem(name); !problem.empty()) {
    fail(step, key, problem);
  }
  if (const std::string clash = tensor_name_clash(name, tensors_); !clash.empty()) {
    fail(step, key, clash);
  }
  tensors_.emplace(name, std::move(state));
}

void StepContext::require_passive(const StepSpec& step, const std::string& key,
                                  const TensorState& state,
                                  const std::vector<std::string>& whole_axes, bool allow_partial) {
  for (int d = 0; d < state.layout.ndim(); ++d) {
    if (d == step.mesh_dim) continue;
    const Placement& p = state.layout.on(d);
    const std::string dim = mesh ? "'" + mesh->dim(d).name + "'" : std::to_string(d);
    const std::string runs_on = mesh ? "'" + mesh->dim(step.mesh_dim).name + "'" : "";
    if (p.is_partial() && !allow_partial) {
      fail(step, key,
           "'" + step.str(key) + "' is Partial(sum) on mesh dim " + dim + "; " +
               std::string(step.op()) + " runs on " + runs_on +
               " and needs it reduced on every other dim first");
    }
    if (p.is_shard() &&
        std::find(whole_axes.begin(), whole_axes.end(), p.axis) != whole_axes.end()) {
      fail(step, key,
           "'" + step.str(key) + "' is " + p.str() + " on mesh dim " + dim + "; " +
               std::string(step.op()) + " runs on " + runs_on + " and needs whole '" + p.axis +
               "' on every other dim");
    }
  }
}

void StepContext::require_replicate_elsewhere(const StepSpec& step, const std::string& key,
                                              const TensorState& state) {
  for (int d = 0; d < state.layout.ndim(); ++d) {
    if (d == step.mesh_dim || state.layout.on(d).is_replicate()) continue;
    const std::string dim = mesh ? "'" + mesh->dim(d).name + "'" : std::to_string(d);
    fail(step, key,
         "'" + step.str(key) + "' is " + state.layout.on(d).str() + " on mesh dim " + dim +
             "; a parameter of " + std::string(step.op()) +
             " is Replicate on every dim but the one the step runs on");
  }
}

void StepContext::fail(const StepSpec& step, const std::string& key, const std::string& message) {
  auto it = step.params.find(key);
  const SourceLoc loc = it != step.params.end() ? it->second.loc : step.loc;
  throw LocatedError(
      located(file_, loc, "steps[" + std::to_string(step.index) + "]." + key, message));
}

}  // namespace shardsim
