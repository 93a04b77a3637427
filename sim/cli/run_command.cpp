#include <sys/resource.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <charconv>
#include <chrono>
#include <iostream>
#include <optional>
#include <sstream>

#include "golden/golden_set.hpp"
#include "core/io.hpp"
#include "report/report.hpp"
#include "cli/commands.hpp"
#include "cli/progress.hpp"
#include "cli/run_options.hpp"
#include "cli/transport_options.hpp"

namespace po = boost::program_options;

namespace shardsim::cli {

namespace {

std::vector<TraceEntry> trace_of(const RunReport& report) {
  std::vector<TraceEntry> trace;
  for (const BoundaryResult& b : report.boundaries) trace.push_back(b.entry);
  return trace;
}

// --golden DIR [--format safetensors|npy] [--dtype LIST] [--reference PRECISION].
struct GoldenRequest {
  std::string dir;
  GoldenOptions options;
  Precision reference;
};

void add_golden_options(po::options_description& options) {
  options.add_options()("golden", po::value<std::string>(),
                        "write golden tensors (goldens.safetensors + manifest.json) into DIR")(
      "format", po::value<std::string>(), "golden format: safetensors (default) or npy")(
      "dtype", po::value<std::string>(),
      "golden dtypes, comma-separated: f64, f32, bf16, f16, both (f64,f32: the default) or all")(
      "reference", po::value<std::string>(),
      "precision of the run the goldens come from (default mp256)");
}

std::optional<GoldenRequest> golden_request(const po::variables_map& vm) {
  if (!vm.count("golden")) {
    for (const char* flag : {"format", "dtype", "reference"}) {
      if (vm.count(flag)) throw InputError(std::string("--") + flag + " needs --golden DIR");
    }
    return std::nullopt;
  }
  GoldenRequest request{vm["golden"].as<std::string>(), {}, parse_precision("mp256")};
  if (vm.count("format")) {
    const std::string format = vm["format"].as<std::string>();
    if (format == "npy") {
      request.options.format = GoldenFormat::npy;
    } else if (format != "safetensors") {
      throw InputError("--format: expected safetensors or npy, got " + quote(format));
    }
  }
  if (vm.count("dtype")) parse_golden_dtypes(vm["dtype"].as<std::string>(), request.options);
  if (vm.count("reference")) {
    try {
      request.reference = parse_precision(vm["reference"].as<std::string>());
    } catch (const InputError& e) {
      throw InputError(std::string("--reference: ") + e.what());
    }
    // Goldens are rounded once from the reference: a run narrower than f64 would give F64 (and
    // F32) goldens that are its own rounding errors, not the reference values the manifest says.
    if (request.reference.kind == ScalarKind::f32 || request.reference.is_narrow()) {
      throw InputError("--reference: " + request.reference.name() +
                       " is narrower than f64; a reference is f64, dd, qd or mpN");
    }
  }
  return request;
}

// Every output of `run`, checked before anything is computed (io.hpp check_outputs): against
// the scenario file before it is loaded, and again against every file it reads (input_paths).
void check_run_outputs(const po::variables_map& vm, const std::optional<GoldenRequest>& golden,
                       const std::vector<std::string>& inputs) {
  std::vector<OutputRequest> outputs;
  add_output(vm, "report", outputs);
  if (golden) {
    const bool npy = golden->options.format == GoldenFormat::npy;
    outputs.push_back({.flag = "--golden",
                       .path = golden->dir,
                       .directory = true,
                       .written_names = {std::string(format::kManifestFile),
                                         std::string(format::kGoldenSafetensorsFile)},
                       .written_suffix = npy ? ".npy" : ""});
  }
  check_outputs(outputs, inputs);
}

// Runs every precision, writing each table to `out`, and returns the reports. The first run's
// trace checks the [expect] names: a misnamed expectation is bad input (exit 2), not unmet.
std::vector<RunReport> run_precisions(const Scenario& scenario,
                                      const std::vector<Precision>& precisions,
                                      const RunOptions& run, const po::variables_map& vm,
                                      const std::optional<GoldenRequest>& golden,
                                      std::optional<std::size_t>& golden_run, std::ostream& out) {
  std::vector<RunReport> reports;
  ProgressLine progress(!vm.count("quiet"));
  for (const Precision& precision : precisions) {
    RunOptions options = run;
    options.capture_tensors = golden && precision == golden->reference && !golden_run;
    options.capture_exact = false;  // goldens need only the rounded values
    if (options.capture_tensors) golden_run = reports.size();
    options.on_boundary = progress.for_run(precision.name());
    const auto start = std::chrono::steady_clock::now();
    reports.push_back(evaluate(scenario, precision, options));
    progress.clear();
    if (reports.size() == 1) check_expectation_names(scenario, trace_of(reports.front()));
    if (vm.count("resources")) {
      struct rusage usage {};
      getrusage(RUSAGE_SELF, &usage);
      reports.back().resources = RunResources{
          .peak_rss_bytes = static_cast<std::int64_t>(usage.ru_maxrss) * 1024,  // KiB on Linux
          .wall_seconds =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
    }
    if (!vm.count("quiet")) out << format_run_table(reports.back()) << "\n";
    if (vm.count("resources")) out << format_resources(reports.back());
  }
  return reports;
}

}  // namespace

int run_command(const Args& args) {
  po::options_description options("run options");
  options.add_options()("precision,p", po::value<std::string>(),
                        "comma-separated levels, e.g. f32,f64,mp256 (default: the scenario's)")(
      "report,r", po::value<std::string>(), "write the JSON report to this file")(
      "quiet,q", "print only the outcome, not the per-boundary tables")(
      "resources",
      "measure each precision's run: peak RSS (the process's high-water mark so far) and wall "
      "time, printed and added to the report (machine-dependent, so off by default)");
  add_mesh_options(options);
  add_golden_options(options);
  add_transport_options(options);
  po::variables_map vm;
  if (!parse_scenario_args(args, options, vm, "usage: shardsim run SCENARIO [options]")) return 0;
  RunOptions run = run_options(vm);
  run.transport = transport_option(vm);
  run.distributed_oracle = distributed_oracle_option(vm);
  // Over the mpi transport every process runs the same control flow; only process 0 writes the
  // report, the goldens and stdout.
  const bool speaker = !run.transport || run.transport->process() == 0;
  const std::optional<GoldenRequest> golden = golden_request(vm);
  check_run_outputs(vm, golden, {vm["scenario"].as<std::string>()});
  const Scenario scenario = load_scenario(vm["scenario"].as<std::string>());
  check_run_outputs(vm, golden, input_paths(scenario));
  check_oracle_option(run, scenario, golden.has_value());
  const std::vector<Precision> precisions =
      vm.count("precision") ? parse_precision_list("--precision", vm["precision"].as<std::string>())
                            : scenario.precisions;
  check_accumulate_applies(run, precisions);
  // Refuse oversized runs before any of them starts; one mp precision takes the mp pools.
  prepare_runs(scenario, precisions, golden ? &golden->reference : nullptr, run);
  // stdout is written at the end: bad input found on the way (e.g. a full disk) leaves it empty.
  std::ostringstream out;
  std::optional<std::size_t> golden_run;  // the replay run that captured the goldens, if any
  const std::vector<RunReport> reports =
      run_precisions(scenario, precisions, run, vm, golden, golden_run, out);
  const Outcome outcome = judge(scenario, reports);
  if (golden) {
    // Goldens: from the replay's run at the reference precision, or one extra (unjudged) run.
    RunOptions options = run;
    options.capture_tensors = true;
    options.capture_exact = false;
    ProgressLine progress(!vm.count("quiet"));
    options.on_boundary = progress.for_run(golden->reference.name() + " (goldens)");
    const RunReport reference =
        golden_run ? reports[*golden_run] : evaluate(scenario, golden->reference, options);
    progress.clear();
    const GoldenSet set =
        speaker ? build_goldens(scenario, reference, golden->options) : GoldenSet{};
    if (speaker) write_goldens(golden->dir, set, golden->options);
    for (const std::string& warning : set.warnings) std::cerr << "warning: " << warning << "\n";
    out << "goldens: " << set.entries.size() << " tensors from the " << golden->reference.name()
        << " run written to " << golden->dir << " ("
        << (golden->options.format == GoldenFormat::npy ? "npy" : "safetensors")
        << " + manifest.json)\n";
  }
  // Over mpi the verdict is process 0's (it holds the oracle; the others' reports carry the trace
  // alone): they leave with its exit code, and the diagnosis reruns on process 0 alone.
  const int code = exit_code_of_process0(run.transport.get(), outcome.matches_expectation ? 0 : 1);
  if (!speaker) return code;
  RunOptions alone = run;
  alone.transport = nullptr;
  // After a divergence only: the probable causes (diagnosis.hpp).
  const Diagnosis diagnosis = outcome.pass ? Diagnosis{} : diagnose(scenario, reports, alone);
  if (vm.count("report") && speaker) {
    const std::string path = vm["report"].as<std::string>();
    std::string json = report_json(scenario, reports, outcome, diagnosis);
    if (run.transport) json = with_transport_field(json, *run.transport, scenario, run);
    write_file_atomically(path, json);
    out << "report: written to " << path << "\n";
  }
  std::cout << out.str() << format_outcome(scenario, outcome, !vm.count("quiet"))
            << format_diagnosis(diagnosis);
  return code;
}

namespace {

// `--diagnose` given without SEL. No command-line word can hold a NUL, so an explicit empty SEL
// (`--diagnose ""`, `--diagnose=`) stays distinguishable and is refused.
const std::string kNoSelector(1, '\0');

// The boundary `--diagnose SEL` names: "#ID" or "ID", or a tensor (its first failing boundary,
// else its first boundary).
int select_boundary(const RunReport& report, const std::string& selector) {
  if (selector.empty()) {
    throw InputError(
        "--diagnose: empty boundary selector; give #ID, ID or a tensor name, or no value for "
        "the first divergence");
  }
  const std::string digits = selector.starts_with("#") ? selector.substr(1) : selector;
  if (!digits.empty() && digits.find_first_not_of("0123456789") == std::string::npos) {
    int id = 0;
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), id);
    if (error != std::errc() || end != digits.data() + digits.size()) {
      throw InputError("--diagnose: no boundary #" + clipped(digits));
    }
    return id;
  }
  int first = -1;
  for (const BoundaryResult& b : report.boundaries) {
    if (b.entry.tensor != selector) continue;
    if (b.status == Status::fail) return b.entry.id;
    if (first < 0) first = b.entry.id;
  }
  if (first < 0) throw InputError("--diagnose: no boundary named " + quote(selector));
  return first;
}

// explain --diagnose [SEL]: without SEL the first divergence of the scenario's precisions (or
// of --precision); with SEL that boundary at --precision (default: the precision of the first
// divergence, earliest_failure; else f64).
std::string signature_analysis(const Scenario& scenario, const po::variables_map& vm,
                               const RunOptions& options) {
  std::vector<Precision> precisions = scenario.precisions;
  if (vm.count("precision")) {
    try {
      precisions = {parse_precision(vm["precision"].as<std::string>())};
    } catch (const InputError& e) {
      throw InputError(std::string("--precision: ") + e.what());
    }
  }
  check_accumulate_applies(options, precisions);
  for (const Precision& precision : precisions) check_memory(scenario, precision, options);
  std::vector<RunReport> reports;
  for (const Precision& precision : precisions) {
    reports.push_back(evaluate(scenario, precision, options));
  }
  const std::string selector = vm["diagnose"].as<std::string>();
  if (selector == kNoSelector) {
    return format_signature_analysis(diagnose(scenario, reports, options));
  }
  const RunReport* failed = earliest_failure(reports);  // the first divergence's run
  const RunReport& chosen = failed ? *failed : reports.front();
  const Precision precision =
      vm.count("precision") || failed ? chosen.precision : parse_precision("f64");
  return format_signature_analysis(
      diagnose_boundary(scenario, precision, options, select_boundary(chosen, selector)));
}

}  // namespace

int explain_command(const Args& args) {
  po::options_description options("explain options");
  add_mesh_options(options);
  // SEL is optional: the help shows it so ("--diagnose [=SEL]", not "--diagnose arg").
  options.add_options()(
      "diagnose", po::value<std::string>()->implicit_value(kNoSelector, "")->value_name("[=SEL]"),
      "after the plan, the signature analysis of the first divergence, or of "
      "boundary SEL (#ID, ID or a tensor name); the word after --diagnose is "
      "read as SEL, so put SCENARIO before it")(
      "precision,p", po::value<std::string>(),
      "with --diagnose: the precision to analyse (default: the one where the first divergence "
      "shows)");
  po::variables_map vm;
  if (!parse_scenario_args(args, options, vm, "usage: shardsim explain SCENARIO [options]"))
    return 0;
  if (vm.count("precision") && !vm.count("diagnose")) {
    throw InputError("--precision needs --diagnose");
  }
  const Scenario scenario = load_scenario(vm["scenario"].as<std::string>());
  const RunOptions run = run_options(vm);
  // The plan runs at f64; --diagnose checks its own precisions.
  if (!vm.count("diagnose")) check_accumulate_applies(run, {parse_precision("f64")});
  check_memory(scenario, parse_precision("f64"), run);
  const RunReport report = evaluate(scenario, parse_precision("f64"), run);
  // The signature analysis runs before anything is printed, so that bad input found on the way
  // (an unknown --diagnose boundary or precision) leaves stdout empty.
  const std::string analysis =
      vm.count("diagnose") ? "\n" + signature_analysis(scenario, vm, run) : std::string();
  std::cout << scenario.name << ": " << scenario.mesh.ranks() << " ranks"
            << (scenario.mesh.devices.ndim() > 1 ? " (mesh " + scenario.mesh.devices.str() + ")"
                                                 : std::string())
            << ", reduce order " << reduce_order_name(report.reduce_order) << ", schedule "
            << report.schedule.str() << "\n";
  // Escaped as messages are (error.hpp): a description is the scenario author's text.
  if (!scenario.description.empty()) std::cout << escaped(scenario.description, true) << "\n";
  std::cout << "\n" << format_trace(trace_of(report)) << analysis;
  return 0;
}

int validate_command(const Args& args) {
  po::options_description options("validate options");
  po::variables_map vm;
  if (!parse_scenario_args(args, options, vm,
                           "usage: shardsim validate SCENARIO\n"
                           "Checks the file, and, when [expect] names a tensor, an op or a chunk, "
                           "that the plan has\nsuch a boundary (this runs the plan once at f64, "
                           "up to the expected step, like explain).")) {
    return 0;
  }
  const Scenario scenario = load_scenario(vm["scenario"].as<std::string>());
  if (scenario.expect.tensor || scenario.expect.op || scenario.expect.chunk) {
    Scenario planned = scenario;  // the names repeat every training step: run up to the one named
    if (planned.train_steps > 0)
      planned.train_steps = std::min(planned.train_steps, scenario.expect.step.value_or(1));
    check_memory(planned, parse_precision("f64"), {});
    check_expectation_names(scenario, trace_of(evaluate(planned, parse_precision("f64"), {})));
  }
  std::cout << scenario.file << ": ok: '" << scenario.name << "', " << scenario.tensors.size()
            << " tensors, " << scenario.steps.size() << " steps, " << scenario.mesh.ranks()
            << " ranks"
            << (scenario.mesh.devices.ndim() > 1 ? " (mesh " + scenario.mesh.devices.str() + ")"
                                                 : std::string())
            << "\n";
  return 0;
}

void print_schema(const OpSchema& op) {
  std::cout << "  " << op.name << ": " << op.summary << "\n";
  for (const ParamSchema& p : op.params) {
    std::cout << "      " << p.key << (p.required ? " (required)" : "") << ": " << p.help;
    if (const std::string range = p.bounds.str(); !range.empty()) {
      std::cout << " {" << range << (p.bounds.note.empty() ? "" : " " + p.bounds.note) << "}";
    }
    if (!p.choices.empty()) {
      std::cout << " [";
      for (std::size_t i = 0; i < p.choices.size(); ++i)
        std::cout << (i ? ", " : "") << p.choices[i];
      std::cout << "]";
    }
    std::cout << "\n";
  }
}

int list_command(const Args& args) {
  if (!args.empty() && (args.front() == "--help" || args.front() == "-h") && args.size() == 1) {
    std::cout << "usage: shardsim list\n"
                 "Prints every op with its keys (types, defaults, bounds, choices), every seeded "
                 "fault,\nthe placements, reduce orders, schedules and precisions. No options.\n";
    return 0;
  }
  if (!args.empty()) throw InputError("list takes no arguments, got " + quote(args.front()));
  std::cout << "ops:\n";
  for (const OpSchema& op : op_schemas()) print_schema(op);
  std::cout << "faults:\n";
  for (const FaultInfo& f : fault_catalogue())
    std::cout << "  " << f.name << ": " << f.summary << "\n";
  std::cout << "placements: Replicate, Partial(sum), Shard(AXIS[, chunk|balanced|padded|zigzag])\n"
               "reduce orders: rank, ring, tree\n"
               "schedules: rank, reverse, shuffle:SEED\n"
               "precisions: bf16, f16, f32, f64, dd, qd, mp<bits> ("
            << kMinMpBits << " <= bits <= " << kMaxMpBits
            << "); bf16/f16 accumulate: f32, storage\n";
  return 0;
}

}  // namespace shardsim::cli
