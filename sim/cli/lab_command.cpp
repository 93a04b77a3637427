// shardsim lab [--precision P]: the function lab (sim/lab/lab.hpp), commands read from stdin.
//
// Interactive (stdin is a terminal): a prompt, and a bad command prints its message and the lab
// goes on. Scripted (stdin is a pipe or file): a bad command stops the lab with
// "stdin:LINE: message" on stderr and exit code 2, so a script with a typo never passes silently.
#include <unistd.h>

#include <boost/program_options.hpp>
#include <iostream>
#include <string>

#include "core/error.hpp"
#include "lab/lab.hpp"
#include "cli/commands.hpp"

namespace po = boost::program_options;

namespace shardsim::cli {

int lab_command(const Args& args) {
  po::options_description options("lab options");
  options.add_options()("precision,p", po::value<std::string>()->default_value("f64"),
                        "evaluate in f32, f64 or mp<bits>")("help,h", "show this help");
  po::options_description all;
  all.add(options).add_options()("extra", po::value<std::vector<std::string>>(), "");
  po::positional_options_description positional;
  positional.add("extra", -1);
  po::variables_map vm;
  parse_command_line(args, all, positional, vm);
  if (vm.count("extra")) {
    throw InputError("lab takes no arguments (commands come from stdin), got " +
                     quote(vm["extra"].as<std::vector<std::string>>().front()));
  }
  if (vm.count("help")) {
    std::cout << "usage: shardsim lab [--precision P] < commands\n\n" << options;
    return 0;
  }
  Precision precision;
  try {
    precision = parse_precision(vm["precision"].as<std::string>());
  } catch (const InputError& e) {
    throw InputError(std::string("--precision: ") + e.what());
  }
  Lab lab(precision);
  const bool interactive = ::isatty(STDIN_FILENO) != 0;
  std::cout << lab.banner();
  std::string line;
  int number = 0;
  while (!lab.finished()) {
    if (interactive) std::cout << "lab> " << std::flush;
    if (!std::getline(std::cin, line)) break;
    ++number;
    try {
      std::cout << lab.execute(line) << std::flush;
    } catch (const InputError& e) {
      if (!interactive) throw InputError("stdin:" + std::to_string(number) + ": " + e.what());
      std::cerr << "lab: " << e.what() << "\n";
    }
  }
  return 0;
}

}  // namespace shardsim::cli
