// shardsim: replay sharded-vs-dense scenarios. See README.md.
#include <boost/program_options/errors.hpp>
#include <cstdio>
#include <exception>
#include <string>

#include "shardsim/error.hpp"
#include "shardsim/report/report.hpp"
#include "sim/cli/commands.hpp"

namespace {

constexpr const char* kUsage =
    "usage: shardsim COMMAND [ARGS]\n"
    "\n"
    "commands:\n"
    "  run SCENARIO [--precision LIST] [--report FILE.json]   replay against the dense oracle\n"
    "  explain SCENARIO                                       the placement plan, per boundary\n"
    "  validate SCENARIO                                      check a scenario file\n"
    "  list                                                   ops, faults, policies\n"
    "  run SCENARIO --golden DIR [--format npy] [--reference mp256]   write golden tensors\n"
    "  precision SCENARIO --levels f32,f64,mp256              the non-associativity table\n"
    "  compare GOLDEN CANDIDATE [--rtol R --atol A --max-ulp U]   a backend against goldens\n"
    "  lab [--precision P]                                    the function lab (y = a*x^2)\n"
    "\n"
    "exit codes: 0 outcome matches the scenario's [expect]; 1 unexpected divergence;\n"
    "            2 bad input or usage; 3 internal error\n"
    "run 'shardsim COMMAND --help' for a command's options.\n";

}  // namespace

int main(int argc, char** argv) {
  using namespace shardsim;
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  const std::string command = argv[1];
  const cli::Args args(argv + 2, argv + argc);
  try {
    if (command == "run") return cli::run_command(args);
    if (command == "explain") return cli::explain_command(args);
    if (command == "validate") return cli::validate_command(args);
    if (command == "list") return cli::list_command(args);
    if (command == "precision") return cli::precision_command(args);
    if (command == "compare") return cli::compare_command(args);
    if (command == "lab") return cli::lab_command(args);
    if (command == "--help" || command == "-h" || command == "help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (command == "--version") {
      std::printf("shardsim %s\n", kShardsimVersion);
      return 0;
    }
    std::fprintf(stderr, "shardsim: unknown command '%s'\n\n%s", command.c_str(), kUsage);
    return 2;
  } catch (const InputError& e) {
    std::fprintf(stderr, "shardsim: error: %s\n", e.what());
    return 2;
  } catch (const boost::program_options::error& e) {
    std::fprintf(stderr, "shardsim %s: error: %s\n", command.c_str(), e.what());
    return 2;
  } catch (const RendezvousError& e) {
    std::fprintf(stderr, "shardsim: collective error: %s\n", e.what());
    return 1;
  } catch (const InternalError& e) {
    std::fprintf(stderr, "shardsim: internal error (please report it): %s\n", e.what());
    return 3;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "shardsim: out of memory\n");
    return 2;
  }
}
