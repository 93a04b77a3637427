// compare() over the mpi transport: a member of detail::ScenarioRun, included by runner-inl.hpp.
#pragma once

#include <exception>
#include <string>

#include "shardsim/error.hpp"
#include "shardsim/transport.hpp"
#include "sim/runner/runner-inl.hpp"

namespace shardsim::detail {

// compare() over the mpi transport: the boundary gathered to process 0, which holds the
// oracle and compares; its verdict (bitwise or not, or the error the comparison raised) goes
// to every process, so all keep the same trace and raise the same error. The others hand
// the sink the entry alone (no values: a report is written by process 0 only).
template <typename T>
bool ScenarioRun<T>::compare_on_root(const BoundaryLabel& label, const TraceEntry& entry,
                                     const DistTensor<T>& tensor, const Tensor<T>* oracle) {
  const DistTensor<T> gathered = world_.share(tensor, /*to_root=*/true);
  std::string verdict;  // "=" bitwise, "~" not, "I" + an InputError's text, "X" + another's
  if (env_.oracle) {
    try {
      verdict = compare(label, entry, gathered, oracle) ? "=" : "~";
    } catch (const InputError& e) {
      verdict = std::string("I") + e.what();
    } catch (const std::exception& e) {
      verdict = std::string("X") + e.what();
    }
  }
  verdict = world_.from_root(std::move(verdict));
  if (verdict.empty()) throw TransportError("process 0 sent no verdict");
  if (verdict[0] == 'I') throw InputError(verdict.substr(1));
  if (verdict[0] == 'X') throw InternalError(verdict.substr(1));
  if (!env_.oracle) sink_.on_boundary(entry, nullptr, DistTensor<T>{});
  return verdict == "=";
}

}  // namespace shardsim::detail
