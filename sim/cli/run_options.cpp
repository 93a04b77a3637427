// The options `run` and `explain` share (run_options.hpp).
#include "cli/run_options.hpp"

#include <string>

#include "core/error.hpp"
#include "core/io.hpp"
#include "core/storage.hpp"
#include "cli/commands.hpp"

namespace po = boost::program_options;

namespace shardsim::cli {

RunOptions run_options(const po::variables_map& vm) {
  apply_thread_option(vm);
  RunOptions options;
  try {
    if (vm.count("reduce-order")) {
      options.reduce_order = parse_reduce_order(vm["reduce-order"].as<std::string>());
    }
  } catch (const InputError& e) {
    throw InputError(std::string("--reduce-order: ") + e.what());
  }
  try {
    if (vm.count("schedule")) options.schedule = parse_schedule(vm["schedule"].as<std::string>());
  } catch (const InputError& e) {
    throw InputError(std::string("--schedule: ") + e.what());
  }
  if (vm.count("accumulate")) {
    const std::string text = vm["accumulate"].as<std::string>();
    options.accumulate = parse_accumulate(text);
    if (!options.accumulate) {
      throw InputError("--accumulate: expected f32 or storage, got " + quote(text));
    }
  }
  if (vm.count("max-memory")) {
    try {
      options.max_memory_bytes = parse_bytes(vm["max-memory"].as<std::string>());
    } catch (const InputError& e) {
      throw InputError(std::string("--max-memory: ") + e.what());  // name the flag
    }
  }
  return options;
}

void check_accumulate_applies(const RunOptions& run, const std::vector<Precision>& precisions) {
  if (!run.accumulate) return;
  std::string listed;
  for (const Precision& p : precisions) {
    if (p.is_narrow()) return;
    listed += (listed.empty() ? "" : ",") + p.name();
  }
  throw InputError("--accumulate: applies to bf16 and f16 runs, and none runs here (precisions " +
                   listed + ")");
}

void add_mesh_options(po::options_description& options) {
  options.add_options()("reduce-order", po::value<std::string>(),
                        "override mesh.reduce_order: rank, ring or tree")(
      "schedule", po::value<std::string>(),
      "override mesh.schedule: rank, reverse or shuffle:SEED")(
      "accumulate", po::value<std::string>(),
      "bf16/f16 runs: override the scenario's accumulate: f32 or storage")(
      "max-memory", po::value<std::string>(),
      "refuse scenarios estimated above this size, e.g. 8GiB (default: 3/4 of physical memory)");
  add_thread_option(options);
}

}  // namespace shardsim::cli
