// evaluate_at: one precision's run judged by the comparator. The per-precision units
// (compare.cpp, compare_mp.cpp, ...) include this file; it includes the comparator.
#pragma once

#include <optional>

#include "compare/compare-inl.hpp"

namespace shardsim {

template <typename T>
RunReport evaluate_at(const Scenario& scenario, const Precision& precision,
                      unsigned significand_bits, const RunOptions& options) {
  std::optional<NarrowFormat> storage;
  if (precision.is_narrow()) storage = narrow_format(precision);
  Comparator<T> comparator(scenario.rtol(precision), options.capture_tensors, storage,
                           options.capture_exact);
  run_scenario<T>(scenario, options, comparator, storage);
  RunReport report;
  report.scenario = scenario.name;
  report.precision = precision;
  if (storage) report.accumulate = options.accumulate.value_or(scenario.accumulate);
  report.significand_bits = significand_bits;
  report.reduce_order = effective_reduce_order(scenario, options);
  report.schedule = effective_schedule(scenario, options);
  report.boundaries = std::move(comparator.results());
  report.activation = std::move(comparator.activation());
  for (const BoundaryResult& b : report.boundaries) {
    if (b.status == Status::fail) {
      report.pass = false;
      if (!report.first_divergence) report.first_divergence = b.first_bad;
    }
  }
  return report;
}

}  // namespace shardsim
