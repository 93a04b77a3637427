#include <unistd.h>

#include <sys/stat.h>

#include <cctype>
#include <iostream>
#include <stdexcept>

#include "shardsim/error.hpp"
#include "sim/cli/commands.hpp"

namespace po = boost::program_options;

namespace shardsim::cli {

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    std::size_t end = text.find(',', begin);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(begin, end - begin);
    if (item.empty()) throw InputError("empty item in list '" + text + "'");
    out.push_back(std::move(item));
    begin = end + 1;
  }
  return out;
}

std::uint64_t parse_bytes(const std::string& text) {
  std::size_t end = 0;
  while (end < text.size() && (std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '.')) {
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
    throw InputError("invalid size '" + text + "': expected e.g. 8GiB, 512MiB or 1000000");
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
    throw InputError("invalid size '" + text + "': unknown unit '" + unit +
                     "' (known: B, K/KiB, M/MiB, G/GiB, T/TiB)");
  }
  const double bytes = value * scale;
  if (!(bytes >= 1) || bytes > 1.8e19) {
    throw InputError("invalid size '" + text + "': must be at least 1 byte and fit in 64 bits");
  }
  return static_cast<std::uint64_t>(bytes);
}

bool parse_scenario_args(const Args& args, po::options_description& options,
                         po::variables_map& vm, const char* usage) {
  options.add_options()("help,h", "show this help");
  po::options_description all;
  all.add(options).add_options()("scenario", po::value<std::string>(), "scenario file");
  po::positional_options_description positional;
  positional.add("scenario", 1);
  po::store(po::command_line_parser(args).options(all).positional(positional).run(), vm);
  po::notify(vm);
  if (vm.count("help")) {
    std::cout << usage << "\n" << options;
    return false;
  }
  if (!vm.count("scenario")) throw InputError(std::string("missing SCENARIO\n") + usage);
  return true;
}

void check_output_path(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  struct stat info {};
  if (::stat(dir.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
    throw InputError(path + ": output directory '" + dir + "' does not exist");
  }
  if (::access(dir.c_str(), W_OK) != 0) {
    throw InputError(path + ": output directory '" + dir + "' is not writable");
  }
}

}  // namespace shardsim::cli
