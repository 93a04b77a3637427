// Reports: the JSON report (stable keys, documented in docs/reports.md "Report format"), the
// terminal table, and the `explain` text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "compare/compare.hpp"
#include "diagnosis/diagnosis.hpp"
#include "core/transport.hpp"

namespace shardsim {

inline constexpr const char* kShardsimVersion = "0.1.0";

// The whole replay: one entry in "runs" per precision. A failed replay also carries
// "diagnosis" (the probable causes, most likely first); a passing one has no such key, so its
// report is unchanged. The three-argument form diagnoses a failed replay itself (with the
// reports' reduce order and schedule).
std::string report_json(const Scenario& scenario, const std::vector<RunReport>& reports,
                        const Outcome& outcome);
std::string report_json(const Scenario& scenario, const std::vector<RunReport>& reports,
                        const Outcome& outcome, const Diagnosis& diagnosis);
// A report of a run over the mpi transport: `json` (report_json) with one more key, on its own
// line right after the opening brace, e.g.
//   "transport": "mpi: 2 processes (ranks 0-3 | 4-7); the dense oracle, the comparison and the
//   output on process 0",
// The rest is byte-identical to the local run's report, so deleting that line (tools/digests
// --launch does) gives the local report. The local transport adds nothing. With --oracle
// distributed (`oracle_rows_extent`: the batch axis' extent) the text names the oracle's row
// blocks instead: "...; the dense oracle in row blocks of batch (rows 0-3 | 4-7), the comparison
// and the output on process 0".
std::string with_transport_field(const std::string& json, const Transport& transport, int ranks,
                                 std::optional<std::int64_t> oracle_rows_extent = std::nullopt);

// The probable causes after a divergence, numbered, each with its evidence (sim/report/
// diagnosis_report.cpp). Empty when nothing was analysed.
std::string format_diagnosis(const Diagnosis& diagnosis);
// Every signature's measurement at the analysed boundary, then the probable causes
// (`explain --diagnose`).
std::string format_signature_analysis(const Diagnosis& diagnosis);

// A per-boundary table for one precision, readable in an 100-column terminal.
std::string format_run_table(const RunReport& report);

// The verdict line(s): what diverged first, where, and whether that was expected. With
// `tables_shown` the first divergence is only pointed at: its run table printed it already.
std::string format_outcome(const Scenario& scenario, const Outcome& outcome,
                           bool tables_shown = false);

// One line of a run's measured resources and its per-rank activation bytes.
// REQUIRES: report.resources.
std::string format_resources(const RunReport& report);

// "step 1 chunk 1 boundary #4 layer_norm -> y, rank 3, index [batch=0, seq=12, hidden=5]"
std::string format_divergence(const Divergence& divergence);

// Every boundary with global shape, placement and each rank's local shape and slice.
std::string format_trace(const std::vector<TraceEntry>& trace);

}  // namespace shardsim
