// shardsim's public API: what an embedding program or a language binding needs. Link the CMake
// target shardsim_engine, which puts include/ and sim/ on the include path.
//
// Load a scenario, run it at a precision, judge it against its [expect] block:
//   Scenario scenario = load_scenario("scenarios/layernorm_sequence_sharded.toml");
//   std::vector<RunReport> reports = {evaluate(scenario, parse_precision("f64"))};
//   Outcome outcome = judge(scenario, reports);
//   std::string json = report_json(scenario, reports, outcome);
// Goldens: build_goldens and write_goldens (golden/golden_set.hpp) from a reference run that
// captured its tensors (RunOptions::capture_tensors); read them back with load_golden_dir, and
// judge another backend's tensors with load_candidate and compare_candidate
// (golden/golden_compare.hpp).
//
// The names below are declared in the layers' own headers (sim/<layer>/); this header is the
// list of which of them are the API. Everything else under sim/ is private to shardsim and may
// change without notice. docs/architecture.md draws the layers.
#pragma once

#include "compare/compare.hpp"         // evaluate, judge, RunReport, Outcome, Divergence
#include "core/error.hpp"              // InputError: bad input, with its location
#include "core/scalar.hpp"             // Precision, parse_precision
#include "golden/golden_compare.hpp"   // compare_candidate, format_comparison
#include "golden/golden_set.hpp"       // build_goldens, write_goldens, load_golden_dir, ...
#include "report/report.hpp"           // report_json, format_run_table, format_outcome
#include "runner/runner.hpp"           // RunOptions
#include "scenario/scenario.hpp"       // load_scenario, parse_scenario, Scenario
