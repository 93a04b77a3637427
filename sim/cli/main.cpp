// shardsim: replay sharded-vs-dense scenarios. See README.md.
//
// Every failure ends here as one line on stderr that starts "shardsim: error: " and an exit code:
// 2 for bad input or usage (InputError, option errors, out of memory, a path the filesystem
// refuses, a collective whose members disagree), 1 for an unexpected divergence, 3 for an
// internal error, 4 when a peer process of an mpi run died or fell silent (the whole job is then
// aborted: MPI_Abort). Nothing escapes as an uncaught exception (which would abort). Under
// mpirun every process that fails prints its own line, prefixed "process P: ".
#include <boost/program_options/errors.hpp>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>

#include "shardsim/error.hpp"
#include "shardsim/report/report.hpp"
#include "shardsim/scenario/scenario.hpp"
#include "shardsim/transport.hpp"
#include "sim/cli/commands.hpp"
#include "sim/transport/mpi_transport.hpp"

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
    "  help [COMMAND]                                         this text, or a command's options\n"
    "\n"
    "exit codes: 0 outcome matches the scenario's [expect]; 1 unexpected divergence;\n"
    "            2 bad input, usage or a collective mismatch; 3 internal error;\n"
    "            4 a peer process of an mpi run died or hung\n"
    "run 'shardsim help COMMAND' (or 'shardsim COMMAND --help') for a command's options.\n";

struct Command {
  const char* name;
  int (*run)(const shardsim::cli::Args&);
};

constexpr Command kCommands[] = {
    {"run", shardsim::cli::run_command},
    {"explain", shardsim::cli::explain_command},
    {"validate", shardsim::cli::validate_command},
    {"list", shardsim::cli::list_command},
    {"precision", shardsim::cli::precision_command},
    {"compare", shardsim::cli::compare_command},
    {"lab", shardsim::cli::lab_command},
};

const Command& find_command(const std::string& name) {
  std::vector<std::string> names{"help"};
  for (const Command& command : kCommands) {
    if (name == command.name) return command;
    names.emplace_back(command.name);
  }
  const std::string hint = shardsim::nearest(name, names);
  throw shardsim::InputError("unknown command " + shardsim::quote(name) +
                             (hint.empty() ? "" : " (did you mean '" + hint + "'?)") +
                             "; 'shardsim help' lists the commands");
}

int dispatch(const std::string& name, const shardsim::cli::Args& args) {
  if (name == "help" || name == "--help" || name == "-h") {
    if (args.empty() || (args.size() == 1 && args.front() == "help")) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (args.size() > 1)
      throw shardsim::InputError("help takes one COMMAND, got " + shardsim::quote(args[1]));
    return find_command(args.front()).run({"--help"});
  }
  if (name == "--version") {
    std::printf("shardsim %s\n", shardsim::kShardsimVersion);
    return 0;
  }
  return find_command(name).run(args);
}

// One line, whatever the message holds; a message is never an echo of megabytes of input.
int fail(const std::string& message, int code) {
  constexpr std::size_t kLimit = 4000;
  std::string line = message.size() > kLimit ? message.substr(0, kLimit) + "..." : message;
  std::fprintf(stderr, "shardsim: error: %s%s\n", shardsim::mpi_process_prefix().c_str(),
               line.c_str());
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace shardsim;
  if (argc < 2) {
    std::fprintf(stderr, "shardsim: error: missing COMMAND\n\n%s", kUsage);
    return 2;
  }
  const std::string command = argv[1];
  try {
    return dispatch(command, cli::Args(argv + 2, argv + argc));
  } catch (const InputError& e) {
    return fail(e.what(), 2);
  } catch (const boost::program_options::error& e) {
    return fail(command + ": " + e.what() + " (see 'shardsim help " + command + "')", 2);
  } catch (const RendezvousError& e) {
    return fail(std::string("collective mismatch: ") + e.what(), 2);
  } catch (const TransportError& e) {
    fail(std::string("transport: ") + e.what() + "; no output was written", 4);
    abort_mpi_job(4);
  } catch (const InternalError& e) {
    return fail(std::string("internal error (please report it): ") + e.what(), 3);
  } catch (const std::bad_alloc&) {
    return fail("out of memory (lower the scenario's sizes, or see --max-memory)", 2);
  } catch (const std::filesystem::filesystem_error& e) {
    return fail(e.path1().string() + ": " + e.code().message(), 2);
  } catch (const std::exception& e) {
    return fail(std::string("internal error (please report it): ") + e.what(), 3);
  } catch (...) {
    return fail("internal error (please report it): an unknown exception", 3);
  }
}
