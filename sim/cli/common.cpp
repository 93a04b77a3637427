#include <unistd.h>

#include <sys/stat.h>

#include "shardsim/error.hpp"
#include "sim/cli/commands.hpp"

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
