// shardsim precision SCENARIO [--levels LIST] [--reduce-order LIST] [--json FILE] [--html FILE]
//                             [--heatmap BOUNDARY]
#include <boost/program_options.hpp>
#include <iostream>

#include "core/error.hpp"
#include "core/io.hpp"
#include "precision/precision_diff.hpp"
#include "report/html_report.hpp"
#include "report/precision_report.hpp"
#include "cli/commands.hpp"

namespace po = boost::program_options;

namespace shardsim::cli {

namespace {

constexpr const char* kPrecisionUsage =
    "usage: shardsim precision SCENARIO [options]\n"
    "Runs SCENARIO at every level and prints, per boundary, each level's error against the\n"
    "highest level and the sharded-vs-dense gap, with a verdict read from the gap's trend over\n"
    "the levels: exact, noise, ill-conditioned noise, bug, or undetermined (fewer than 3 levels).\n"
    "exit codes: 0 unless a boundary's verdict is 'bug' in a scenario that expects to pass;\n"
    "            1 then; 2 bad input or usage\n";

// --reduce-order LIST (several: a sweep) and --schedule.
void parse_order_options(const po::variables_map& vm, PrecisionDiffOptions& diff_options) {
  if (vm.count("reduce-order")) {
    std::vector<ReduceOrder> orders;
    for (const std::string& order :
         split_list("--reduce-order", vm["reduce-order"].as<std::string>())) {
      try {
        orders.push_back(parse_reduce_order(order));
      } catch (const InputError& e) {
        throw InputError(std::string("--reduce-order: ") + e.what());
      }
    }
    diff_options.run.reduce_order = orders.front();
    if (orders.size() > 1) diff_options.sweep_orders = orders;
  }
  try {
    if (vm.count("schedule")) {
      diff_options.run.schedule = parse_schedule(vm["schedule"].as<std::string>());
    }
  } catch (const InputError& e) {
    throw InputError(std::string("--schedule: ") + e.what());
  }
}

}  // namespace

int precision_command(const Args& args) {
  po::options_description options("precision options");
  options.add_options()("levels,l", po::value<std::string>()->default_value(kDefaultLevels),
                        "comma-separated precision levels; the one with most bits is the top")(
      "reduce-order", po::value<std::string>(),
      "comma-separated reduce orders (rank, ring, tree): the first is used for the levels; with "
      "two or more, the f32/f64 reduce-order sweep runs over all of them")(
      "schedule", po::value<std::string>(), "override mesh.schedule")(
      "json", po::value<std::string>(), "write the JSON report to this file")(
      "html", po::value<std::string>(), "write the self-contained HTML report to this file")(
      "heatmap", po::value<std::string>(),
      "the boundary the HTML report opens on: #ID, ID or a tensor name (default: the first "
      "divergent boundary)")("quiet,q", "print only the verdict summary");
  add_thread_option(options);
  po::variables_map vm;
  if (!parse_scenario_args(args, options, vm, kPrecisionUsage)) return 0;
  apply_thread_option(vm);
  std::vector<OutputRequest> outputs;
  add_output(vm, "json", outputs);
  add_output(vm, "html", outputs);
  if (vm.count("heatmap") && !vm.count("html")) throw InputError("--heatmap needs --html FILE");
  check_outputs(outputs, {vm["scenario"].as<std::string>()});
  const Scenario scenario = load_scenario(vm["scenario"].as<std::string>());
  check_outputs(outputs, input_paths(scenario));  // also the input files it read
  PrecisionDiffOptions diff_options;
  diff_options.levels = parse_precision_list("--levels", vm["levels"].as<std::string>());
  parse_order_options(vm, diff_options);
  const std::string json_path = vm.count("json") ? vm["json"].as<std::string>() : "";
  const std::string html_path = vm.count("html") ? vm["html"].as<std::string>() : "";

  const PrecisionDiff diff = precision_diff(scenario, diff_options);
  std::vector<Heatmap> heatmaps;
  std::optional<std::size_t> chosen;
  if (!html_path.empty()) {
    if (vm.count("heatmap")) {
      const std::string selector = vm["heatmap"].as<std::string>();
      chosen = find_boundary(diff, selector);
      if (!chosen) {
        throw InputError(
            "--heatmap " + quote(selector) +
            ": no such boundary (give #ID or a tensor name; 'shardsim explain' lists them)");
      }
    } else {
      chosen = first_divergent_boundary(diff);
    }
    if (chosen) {
      for (std::size_t l = 0; l < diff.levels.size(); ++l)
        heatmaps.push_back(make_heatmap(diff, l, *chosen));
    }
  }
  const std::string text = format_precision_diff(diff);
  if (vm.count("quiet")) {
    std::cout << text.substr(text.find("\nverdicts: ") + 1);
  } else {
    std::cout << text;
  }
  if (!json_path.empty()) {
    write_file_atomically(json_path, precision_diff_json(diff));
    std::cout << "json report: written to " << json_path << "\n";
  }
  if (!html_path.empty()) {
    write_file_atomically(html_path, precision_html(diff, chosen, heatmaps));
    std::cout << "html report: written to " << html_path << "\n";
  }
  bool any_bug = false;
  for (const BoundaryDiff& b : diff.boundaries) any_bug = any_bug || b.verdict == Verdict::bug;
  return any_bug && scenario.expect.pass ? 1 : 0;
}

}  // namespace shardsim::cli
