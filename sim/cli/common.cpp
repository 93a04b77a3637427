#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "core/error.hpp"
#include "core/parallel.hpp"

namespace po = boost::program_options;

namespace shardsim::cli {

std::vector<std::string> split_list(const std::string& flag, const std::string& text) {
  std::vector<std::string> out;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    std::size_t end = text.find(',', begin);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(begin, end - begin);
    if (item.empty()) throw InputError(flag + ": empty item in list " + quote(text));
    out.push_back(std::move(item));
    begin = end + 1;
  }
  return out;
}

std::uint64_t parse_bytes(const std::string& text) {
  std::size_t end = 0;
  while (end < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '.')) {
    ++end;
  }
  const std::string number = text.substr(0, end);
  const std::string unit = text.substr(end);
  double value = 0;
  try {
    std::size_t used = 0;
    value = std::stod(number, &used);
    if (used != number.size()) throw std::invalid_argument("trailing");
  } catch (const std::exception&) {
    throw InputError("invalid size " + quote(text) + ": expected e.g. 8GiB, 512MiB or 1000000");
  }
  double scale = 1;
  if (unit == "" || unit == "B") {
    scale = 1;
  } else if (unit == "K" || unit == "KiB" || unit == "KB") {
    scale = 1024.0;
  } else if (unit == "M" || unit == "MiB" || unit == "MB") {
    scale = 1024.0 * 1024;
  } else if (unit == "G" || unit == "GiB" || unit == "GB") {
    scale = 1024.0 * 1024 * 1024;
  } else if (unit == "T" || unit == "TiB" || unit == "TB") {
    scale = 1024.0 * 1024 * 1024 * 1024;
  } else {
    throw InputError("invalid size " + quote(text) + ": unknown unit " + quote(unit) +
                     " (known: B, K/KiB, M/MiB, G/GiB, T/TiB)");
  }
  const double bytes = value * scale;
  if (!(bytes >= 1) || bytes > 1.8e19) {
    throw InputError("invalid size " + quote(text) +
                     ": must be at least 1 byte and fit in 64 bits");
  }
  return static_cast<std::uint64_t>(bytes);
}

void parse_command_line(const Args& args, const po::options_description& options,
                        const po::positional_options_description& positional,
                        po::variables_map& vm) {
  constexpr int kStyle =
      po::command_line_style::default_style & ~po::command_line_style::allow_guessing;
  // Positional words past the command's own go to a hidden option, so that the error can name
  // the first of them (Boost's own says only "too many positional options").
  constexpr const char* kExtra = "unexpected-argument";
  const unsigned named = positional.max_total_count();
  const bool bounded = named != std::numeric_limits<unsigned>::max();
  po::options_description all;
  all.add(options);
  po::positional_options_description with_extra;
  if (bounded) {
    all.add_options()(kExtra, po::value<std::vector<std::string>>());
    for (unsigned i = 0; i < named; ++i) with_extra.add(positional.name_for_position(i).c_str(), 1);
    with_extra.add(kExtra, -1);
  }
  po::store(po::command_line_parser(args)
                .options(all)
                .positional(bounded ? with_extra : positional)
                .style(kStyle)
                .run(),
            vm);
  if (vm.count(kExtra)) {
    throw InputError("unexpected argument " + quote(vm[kExtra].as<std::vector<std::string>>()[0]) +
                     ": this command takes " + std::to_string(named) + " positional argument" +
                     (named == 1 ? "" : "s"));
  }
  po::notify(vm);
}

bool parse_scenario_args(const Args& args, po::options_description& options, po::variables_map& vm,
                         const char* usage) {
  options.add_options()("help,h", "show this help");
  po::options_description all;
  all.add(options).add_options()("scenario", po::value<std::string>(), "scenario file");
  po::positional_options_description positional;
  positional.add("scenario", 1);
  parse_command_line(args, all, positional, vm);
  if (vm.count("help")) {
    std::cout << usage << "\n" << options;
    return false;
  }
  if (!vm.count("scenario")) {
    const std::string first_line(usage, std::strcspn(usage, "\n"));
    throw InputError("missing SCENARIO (" + first_line + ")");
  }
  if (vm["scenario"].as<std::string>().empty()) throw InputError("SCENARIO is an empty path");
  return true;
}

std::vector<Precision> parse_precision_list(const std::string& flag, const std::string& text) {
  std::vector<Precision> out;
  for (const std::string& level : split_list(flag, text)) {
    Precision precision;
    try {
      precision = parse_precision(level);
    } catch (const InputError& e) {
      throw InputError(flag + ": " + e.what());
    }
    if (std::find(out.begin(), out.end(), precision) != out.end()) {
      throw InputError(flag + ": precision " + quote(level) + " is listed twice");
    }
    out.push_back(precision);
  }
  return out;
}

void add_thread_option(po::options_description& options) {
  options.add_options()("threads", po::value<std::string>(),
                        "threads to use (default: SHARDSIM_THREADS, else every core); reports and "
                        "goldens are byte-identical for every count");
}

void apply_thread_option(const po::variables_map& vm) {
  if (vm.count("threads")) {
    set_thread_count(parse_thread_count(vm["threads"].as<std::string>(), "--threads"));
  } else if (const char* env = std::getenv("SHARDSIM_THREADS"); env != nullptr) {
    set_thread_count(parse_thread_count(env, "SHARDSIM_THREADS"));
  }
}

void add_output(const po::variables_map& vm, const std::string& flag,
                std::vector<OutputRequest>& outputs) {
  if (vm.count(flag)) outputs.push_back({.flag = "--" + flag, .path = vm[flag].as<std::string>()});
}

}  // namespace shardsim::cli
