#include "report/report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>

#include "report/fsdp_report.hpp"
#include "report/json_metric.hpp"

namespace shardsim {

namespace {

using Json = nlohmann::ordered_json;

Json shape_json(const Shape& shape) {
  Json out = Json::object();
  for (const Axis& axis : shape.axes()) out[axis.name] = axis.extent;
  return out;
}

Json divergence_json(const Divergence& d) {
  Json index = Json::object();
  for (const auto& [axis, i] : d.index) index[axis] = i;
  Json out{{"boundary", d.boundary}, {"step", d.step}, {"chunk", d.chunk}};
  if (d.micro_count > 0) out["micro"] = d.micro;  // only in micro-batched runs
  out.update(Json{{"op", d.op},
                  {"tensor", d.tensor},
                  {"rank", d.rank},
                  {"index", index},
                  {"dense", json_metric(d.dense)},
                  {"sharded", json_metric(d.sharded)},
                  {"reason", d.reason}});
  return out;
}

Json boundary_json(const BoundaryResult& b) {
  const TraceEntry& e = b.entry;
  Json ranks = Json::array();
  for (const RankExtent& r : e.ranks) {
    Json offset = Json::object();
    for (const auto& [axis, begin] : r.offset) offset[axis] = begin;
    ranks.push_back(Json{{"rank", r.rank},
                         {"local_shape", shape_json(r.local_shape)},
                         {"offset", offset},
                         {"slice", r.slice}});
  }
  Json out{{"id", e.id}, {"step", e.step}, {"chunk", e.chunk}};
  if (e.micro_count > 0) out["micro"] = e.micro;  // only in micro-batched runs
  out.update(Json{{"kind", boundary_kind_name(e.kind)},
                  {"op", e.op},
                  {"tensor", e.tensor},
                  {"dense", e.dense},
                  {"exact_claimed", e.exact},
                  {"global_shape", shape_json(e.global)},
                  {"placement", e.layout.str()},
                  {"ranks", ranks},
                  {"max_abs", magnitude_json(b.max_abs)},
                  {"max_rel", magnitude_json(b.max_rel)},
                  {"max_ulp", json_metric(b.max_ulp)},
                  {"rtol", magnitude_json(b.rtol)},
                  {"status", status_name(b.status)},
                  {"notes", e.notes}});
  return out;
}

// [{cause, confidence, evidence}], most likely first; confidence to two decimals.
Json diagnosis_json(const Diagnosis& diagnosis) {
  Json causes = Json::array();
  for (const Finding& f : diagnosis.causes) {
    causes.push_back(Json{{"cause", cause_name(f.cause)},
                          {"confidence", std::round(f.confidence * 100) / 100},
                          {"evidence", f.evidence}});
  }
  return causes;
}

std::string short_scientific(double value) {
  if (value == 0) return "0";
  if (std::isinf(value)) return "inf";
  if (std::isnan(value)) return "nan";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2e", value);
  return buf;
}

// Beyond the normal double range (an mp gap), the Magnitude's own decimal text.
std::string short_scientific(const Magnitude& value) {
  if (value.is_finite() && !value.is_zero() && value.exponent() <= -1021) return value.sci(2);
  return short_scientific(value.to_double());
}

}  // namespace

std::string format_divergence(const Divergence& d) {
  std::ostringstream out;
  out << where_label(d.step, d.micro, d.micro_count, d.chunk) << " boundary #" << d.boundary << " "
      << d.op << " -> " << d.tensor << ", rank " << d.rank << ", index [";
  for (std::size_t i = 0; i < d.index.size(); ++i) {
    out << (i ? ", " : "") << d.index[i].first << "=" << d.index[i].second;
  }
  char values[96];
  std::snprintf(values, sizeof values, "]: dense %.17g, sharded %.17g (", d.dense, d.sharded);
  if (d.dense_text.empty()) {
    out << values;
  } else {  // an mp run: doubles may print alike, these texts differ
    out << "]: dense " << d.dense_text << ", sharded " << d.sharded_text << " (";
  }
  out << d.reason << ")";
  return out.str();
}

std::string report_json(const Scenario& scenario, const std::vector<RunReport>& reports,
                        const Outcome& outcome) {
  Diagnosis diagnosis;
  if (!outcome.pass) diagnosis = diagnose(scenario, reports);
  return report_json(scenario, reports, outcome, diagnosis);
}

std::string report_json(const Scenario& scenario, const std::vector<RunReport>& reports,
                        const Outcome& outcome, const Diagnosis& diagnosis) {
  Json expected{{"verdict", scenario.expect.pass ? "pass" : "fail"}};
  if (scenario.expect.step) expected["step"] = *scenario.expect.step;
  if (scenario.expect.chunk) expected["chunk"] = *scenario.expect.chunk;
  if (scenario.expect.micro) expected["micro"] = *scenario.expect.micro;
  if (scenario.expect.tensor) expected["tensor"] = *scenario.expect.tensor;
  if (scenario.expect.op) expected["op"] = *scenario.expect.op;
  Json first = nullptr;
  if (outcome.first_divergence) {
    first = divergence_json(*outcome.first_divergence);
    first["precision"] = outcome.failed_at->name();
  }
  Json runs = Json::array();
  for (const RunReport& r : reports) {
    Json boundaries = Json::array();
    for (const BoundaryResult& b : r.boundaries) {
      boundaries.push_back(boundary_json(b));
      // A narrow run: the format each boundary's values are held in (storage.hpp).
      if (r.accumulate) {
        const bool narrow = b.entry.narrow || *r.accumulate == Accumulate::storage;
        boundaries.back()["dtype"] = narrow ? r.precision.name() : "f32";
      }
    }
    runs.push_back(Json{{"scenario", r.scenario},
                        {"precision", r.precision.name()},
                        {"significand_bits", r.significand_bits},
                        {"reduce_order", reduce_order_name(r.reduce_order)},
                        {"schedule", r.schedule.str()},
                        {"verdict", r.pass ? "pass" : "fail"},
                        {"first_divergence",
                         r.first_divergence ? divergence_json(*r.first_divergence) : Json(nullptr)},
                        {"boundaries", boundaries}});
    Json steps = Json::array();
    for (const ActivationMemory::StepShare& share : r.activation.steps) {
      steps.push_back(Json{{"step", share.step},
                           {"op", share.op},
                           {"output", share.output},
                           {"bytes", share.bytes}});
    }
    if (r.accumulate) runs.back()["accumulate"] = accumulate_name(*r.accumulate);
    runs.back()["activation_bytes"] = r.activation.per_rank;
    runs.back()["activation_steps"] = steps;
    if (const auto& m = r.activation.parameters) {
      runs.back()["parameter_memory"] = Json{{"style", m->style},
                                             {"dim", m->dim},
                                             {"sharded_params", m->sharded_params},
                                             {"sharded_grads", m->sharded_grads},
                                             {"optimizer_state", m->optimizer_state},
                                             {"gathered_peak", m->gathered_peak},
                                             {"unsharded_grads_peak", m->unsharded_grads_peak}};
    }
    if (r.resources) {
      runs.back()["resources"] = Json{{"peak_rss_bytes", r.resources->peak_rss_bytes},
                                      {"wall_seconds", r.resources->wall_seconds}};
    }
  }
  Json root{{"scenario", scenario.name},
            {"file", scenario.file},
            {"shardsim_version", kShardsimVersion},
            {"ranks", scenario.mesh.ranks()},
            {"faults", scenario.fault_names()},
            {"verdict", outcome.pass ? "pass" : "fail"},
            {"first_divergence", first},
            {"expected", expected},
            {"matches_expectation", outcome.matches_expectation}};
  if (scenario.fsdp) root["fsdp"] = fsdp_json(scenario);
  if (scenario.clip_grad_norm) root["clip_grad_norm"] = *scenario.clip_grad_norm;
  if (!outcome.pass) root["diagnosis"] = diagnosis_json(diagnosis);
  root["runs"] = runs;
  return root.dump(2) + "\n";
}

std::string with_transport_field(const std::string& json, const Transport& transport, int ranks,
                                 std::optional<std::int64_t> oracle_rows_extent) {
  auto range = [](std::int64_t begin, std::int64_t end) {  // [begin, end) as "b" or "b-e"
    return std::to_string(begin) +
           (end - 1 > begin ? "-" + std::to_string(end - 1) : std::string());
  };
  const int processes = transport.processes();
  std::string blocks;
  for (int p = 0; p < processes; ++p) {
    const RankBlock b = rank_block(p, processes, ranks);
    blocks += (p ? " | " : "") + range(b.begin, b.end);
  }
  std::string oracle = "the dense oracle, the comparison and the output on process 0";
  if (oracle_rows_extent) {
    std::string rows;
    for (int p = 0; p < processes; ++p) {
      const OracleRows r = oracle_rows(*oracle_rows_extent, p, processes);
      rows += (p ? " | " : "") + range(r.begin, r.end);
    }
    oracle = "the dense oracle in row blocks of " + std::string(kOracleRowsAxis) + " (rows " +
             rows + "), the comparison and the output on process 0";
  }
  const std::string line = "  \"transport\": \"" + std::string(transport.name()) + ": " +
                           std::to_string(processes) + " process" + (processes > 1 ? "es" : "") +
                           " (ranks " + blocks + "); " + oracle + "\",\n";
  SHARDSIM_ASSERT(json.starts_with("{\n"), "a report is a JSON object, one key per line");
  return "{\n" + line + json.substr(2);
}

std::string format_run_table(const RunReport& r) {
  std::ostringstream out;
  out << "== " << r.precision.name() << " (" << r.significand_bits << "-bit significand), ";
  if (r.accumulate) out << "accumulate " << accumulate_name(*r.accumulate) << ", ";
  out << "reduce " << reduce_order_name(r.reduce_order) << ", schedule " << r.schedule.str() << ": "
      << (r.pass ? "pass" : "FAIL") << "\n";
  // Columns as wide as their longest entry (at least 20), so a long op name never shifts a row.
  // A micro-batched run has a "micro" column (j/k) after the step.
  int op_width = 20, tensor_width = 20;
  bool micro = false;
  for (const BoundaryResult& b : r.boundaries) {
    op_width = std::max(op_width, static_cast<int>(b.entry.op.size()));
    tensor_width = std::max(tensor_width, static_cast<int>(b.entry.tensor.size()));
    micro = micro || b.entry.micro_count > 0;
  }
  auto row = [&](const char* id, const std::string& step, const char* chunk, const std::string& op,
                 const std::string& tensor, const std::string& placement, const std::string& status,
                 const std::string& abs, const std::string& rel, const std::string& ulp) {
    char line[160];
    std::snprintf(line, sizeof line, "%4s %4s %5s  ", id, step.c_str(), chunk);
    out << line << std::left << std::setw(op_width) << op << " " << std::setw(tensor_width)
        << tensor << " " << std::setw(20) << placement << " ";
    std::snprintf(line, sizeof line, "%-7s %9s %9s %9s\n", status.c_str(), abs.c_str(), rel.c_str(),
                  ulp.c_str());
    out << line;
  };
  auto step_cell = [&](const TraceEntry& e) {
    if (!micro) return std::to_string(e.step);
    char cell[64];
    const std::string j = e.micro > 0
                              ? std::to_string(e.micro) + "/" + std::to_string(e.micro_count)
                              : "-";  // the scenario's tensors as loaded
    std::snprintf(cell, sizeof cell, "%4d %7s", e.step, j.c_str());
    return std::string(cell);
  };
  row("id", micro ? "step   micro" : "step", "chunk", "op", "tensor", "placement", "status",
      "max_abs", "max_rel", "max_ulp");
  for (const BoundaryResult& b : r.boundaries) {
    const TraceEntry& e = b.entry;
    row(std::to_string(e.id).c_str(), step_cell(e), std::to_string(e.chunk).c_str(), e.op, e.tensor,
        e.layout.str(), std::string(status_name(b.status)), short_scientific(b.max_abs),
        short_scientific(b.max_rel), short_scientific(b.max_ulp));
    for (const std::string& note : e.notes) out << "           note: " << note << "\n";
  }
  if (!r.activation.steps.empty() && !r.activation.forward_only) {
    std::int64_t total = 0;
    out << "activation memory kept for backward, bytes per rank:";
    for (std::int64_t bytes : r.activation.per_rank) {
      out << " " << bytes;
      total += bytes;
    }
    out << " (total " << total << ")\n";
  }
  if (r.activation.parameters && !r.activation.forward_only) {
    out << format_parameter_memory(*r.activation.parameters);
  }
  if (r.first_divergence)
    out << "first divergence: " << format_divergence(*r.first_divergence) << "\n";
  return out.str();
}

std::string format_resources(const RunReport& r) {
  std::ostringstream out;
  char line[160];
  std::snprintf(line, sizeof line, "resources (%s): peak RSS %.1f MiB (%lld bytes), wall %.2f s",
                r.precision.name().c_str(), double(r.resources->peak_rss_bytes) / (1 << 20),
                static_cast<long long>(r.resources->peak_rss_bytes), r.resources->wall_seconds);
  out << line << "; activation bytes per rank:";
  for (std::int64_t bytes : r.activation.per_rank) out << " " << bytes;
  out << "\n";
  return out.str();
}

std::string format_outcome(const Scenario& scenario, const Outcome& outcome, bool tables_shown) {
  std::ostringstream out;
  out << scenario.name << ": " << (outcome.pass ? "pass" : "FAIL");
  if (outcome.first_divergence && tables_shown) {
    out << " (first divergence at " << outcome.failed_at->name() << ": in its table above)";
  } else if (outcome.first_divergence) {
    out << " (first divergence at " << outcome.failed_at->name() << ": "
        << format_divergence(*outcome.first_divergence) << ")";
  }
  out << "\n";
  if (outcome.matches_expectation) {
    out << "outcome matches the expectation (" << (scenario.expect.pass ? "pass" : "fail") << ")\n";
  } else {
    out << "UNEXPECTED: " << outcome.why << "\n";
  }
  return out.str();
}

std::string format_trace(const std::vector<TraceEntry>& trace) {
  std::string out;
  for (const TraceEntry& entry : trace) out += format_entry(entry);
  return out;
}

}  // namespace shardsim
