// shardsim: replay sharded-vs-dense scenarios. See docs/README.md (the manual's index).
//
// Every failure ends here as one line on stderr that starts "shardsim: error: " and an exit code:
// 2 for bad input or usage (InputError, option errors, out of memory, a path the filesystem
// refuses, a collective whose members disagree), 1 for an unexpected divergence, 3 for an
// internal error, 4 when a peer process of an mpi run died or fell silent (the whole job is then
// aborted: MPI_Abort). Nothing escapes as an uncaught exception (which would abort). Under
// mpirun every process that fails prints its own line, prefixed "process P: ".
#include <unistd.h>

#include <boost/program_options/errors.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>

#include "core/error.hpp"
#include "report/report.hpp"
#include "scenario/scenario.hpp"
#include "core/transport.hpp"
#include "cli/commands.hpp"
#include "transport/mpi_transport.hpp"

namespace {

// The allocator settings a run uses (docs/threads-and-memory.md "Memory: the allocator settings"):
// glibc's malloc advises transparent huge pages on the memory it takes from the kernel (hugetlb=1),
// grows its heap by 64 MiB at a time (top_pad) and serves blocks below 32 MiB from that heap
// (mmap_threshold; larger ones are mapped, advised and unmapped on free as before). On a VM, where
// a page fault is costly, a run's 4 KiB faults were most of its system time: an mp256 LayerNorm of
// 4 M elements made 280 000 of them (6.9 s) and makes 2 500 (4.1 s) with these, at the same peak
// RSS. A long run that reuses freed blocks many times can peak higher (the realistic qd run at seq
// 1024: 2.16 -> 2.40 GiB). Only memory placement changes, never a value.
constexpr const char* kTunables =
    "glibc.malloc.hugetlb=1:glibc.malloc.mmap_threshold=33554432:glibc.malloc.top_pad=67108864";

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;  // the sanitizers' own allocators ignore glibc's tunables
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

// Whether the kernel gives transparent huge pages to memory advised for them ("always" or
// "madvise"). Without them the settings would mostly move blocks below 32 MiB from their own
// mappings into the heap, where freed holes raise the peak (the realistic qd run at seq 1024:
// 2.16 -> 2.51 GiB) for a few percent of time, so they are not used.
bool kernel_gives_huge_pages() {
  std::FILE* file = std::fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  if (file == nullptr) return false;
  char text[128] = {};
  const std::size_t read = std::fread(text, 1, sizeof text - 1, file);
  std::fclose(file);
  text[read] = '\0';
  return std::strstr(text, "[always]") != nullptr || std::strstr(text, "[madvise]") != nullptr;
}

// glibc reads its tunables once, before main, from GLIBC_TUNABLES, so the settings take effect by
// executing this binary again with them. Skipped when GLIBC_TUNABLES is set (the user's choice,
// an empty value included, or this second start), when the kernel gives no huge pages, under
// valgrind (whose tools follow an exec only when asked) and in sanitizer builds; if the exec
// fails the run goes on with the defaults.
void use_allocator_settings(char** argv) {
#if defined(__linux__) && defined(__GLIBC__)
  if (kSanitized || std::getenv("GLIBC_TUNABLES") != nullptr || !kernel_gives_huge_pages()) return;
  const char* preload = std::getenv("LD_PRELOAD");
  if (preload != nullptr && std::strstr(preload, "vgpreload") != nullptr) return;
  if (setenv("GLIBC_TUNABLES", kTunables, 1) != 0) return;
  execv("/proc/self/exe", argv);
  unsetenv("GLIBC_TUNABLES");
#else
  (void)argv;
#endif
}

// `--version`'s second line: the allocator settings in force.
std::string allocator_line() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables == nullptr) return "allocator: the C library's defaults";
  if (std::strcmp(tunables, kTunables) == 0) return std::string("allocator: ") + kTunables;
  return std::string("allocator: GLIBC_TUNABLES=\"") + tunables + "\" (from the environment)";
}

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
    std::printf("shardsim %s\n%s\n", shardsim::kShardsimVersion, allocator_line().c_str());
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
  use_allocator_settings(argv);
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
