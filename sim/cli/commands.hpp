// The subcommands. Each parses its own options and returns the process exit code:
// 0 outcome as expected, 1 unexpected divergence, 2 bad input or usage.
#pragma once

#include <boost/program_options.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "core/io.hpp"
#include "core/scalar.hpp"

namespace shardsim::cli {

using Args = std::vector<std::string>;  // the arguments after the subcommand name

int run_command(const Args& args);
int explain_command(const Args& args);
int validate_command(const Args& args);
int list_command(const Args& args);
int precision_command(const Args& args);  // precision_command.cpp
int compare_command(const Args& args);    // compare_command.cpp
int lab_command(const Args& args);        // lab_command.cpp

// Shared helpers.
// Parses `args` against `options` and the `positional` names into `vm`. Only exact option names
// and the documented one-letter aliases are accepted: Boost's guessing of unique prefixes is
// off, so '--prec' is an error instead of a silent '--precision'.
void parse_command_line(const Args& args,
                        const boost::program_options::options_description& options,
                        const boost::program_options::positional_options_description& positional,
                        boost::program_options::variables_map& vm);
// Parses `args` with `options` (plus --help) and one positional SCENARIO into `vm`. Returns false
// after printing `usage` and the options for --help; throws InputError when SCENARIO is missing.
bool parse_scenario_args(const Args& args, boost::program_options::options_description& options,
                         boost::program_options::variables_map& vm, const char* usage);
// "a,b" -> {"a", "b"}; an empty item is bad input, named with `flag`.
std::vector<std::string> split_list(const std::string& flag, const std::string& text);
// A comma-separated list of precisions given with `flag`; each at most once.
std::vector<Precision> parse_precision_list(const std::string& flag, const std::string& text);
// "8GiB", "512MiB", "2G", "1000000" -> bytes (K/M/G/T are powers of 1024, as are KiB...).
// Throws InputError on anything else.
std::uint64_t parse_bytes(const std::string& text);
// --threads N: the threads parallel loops use (parallel.hpp). apply_thread_option sets the count
// from --threads, else from the SHARDSIM_THREADS environment variable, else leaves the default
// (every core). A bad value of either is an InputError naming it. Results never depend on it.
void add_thread_option(boost::program_options::options_description& options);
void apply_thread_option(const boost::program_options::variables_map& vm);
// The output of `flag` when given (an OutputRequest for check_outputs), else nothing.
void add_output(const boost::program_options::variables_map& vm, const std::string& flag,
                std::vector<OutputRequest>& outputs);

}  // namespace shardsim::cli
