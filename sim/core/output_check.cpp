// check_outputs (io.hpp): every output path is checked before any work, so that bad usage
// computes nothing and writes nothing. Only non-throwing filesystem calls are used.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>

#include "core/error.hpp"
#include "core/io.hpp"

namespace shardsim {

namespace {

namespace fs = std::filesystem;

// `path` without trailing slashes ("/" stays "/").
std::string strip_slashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

// An absolute, normalized spelling of `path` with the symlinks of its existing part resolved:
// two spellings of one location compare equal.
std::string normal_path(const std::string& path) {
  std::error_code ec;
  fs::path absolute = fs::absolute(path, ec);
  if (ec) absolute = path;
  fs::path resolved = fs::weakly_canonical(absolute, ec);
  if (ec) resolved = absolute;
  return strip_slashes(resolved.lexically_normal().string());
}

std::string parent_of(const std::string& path) {
  const std::string bare = strip_slashes(path);
  const std::size_t slash = bare.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : bare.substr(0, slash);
}

std::optional<struct stat> stat_of(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return std::nullopt;
  return info;
}

// A checked output: its request, its normalized path and, when it exists, its identity.
struct Checked {
  const OutputRequest* request;
  std::string normal;
  std::optional<struct stat> existing;
};

[[noreturn]] void refuse(const OutputRequest& out, const std::string& why) {
  throw InputError(out.flag + " " + out.path + ": " + why);
}

void check_parent(const OutputRequest& out) {
  const std::string parent = parent_of(out.path);
  const std::optional<struct stat> info = stat_of(parent);
  if (!info || !S_ISDIR(info->st_mode)) {
    refuse(out, "output directory '" + parent + "' does not exist");
  }
  if (::access(parent.c_str(), W_OK | X_OK) != 0) {
    refuse(out, "output directory '" + parent + "' is not writable");
  }
}

// Whether a directory output writes a file named `name` into it.
bool writes_name(const OutputRequest& r, const std::string& name) {
  return std::find(r.written_names.begin(), r.written_names.end(), name) != r.written_names.end() ||
         (!r.written_suffix.empty() && name.ends_with(r.written_suffix));
}

// An existing directory output: every entry at a name it writes must be a regular file (or a
// link to one), which the write replaces; a directory, FIFO or device there would fail the
// write half-way, after the work.
void check_written_entries(const OutputRequest& out) {
  std::error_code ec;
  for (fs::directory_iterator it(out.path, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!writes_name(out, name)) continue;
    std::error_code status_ec;
    const fs::file_status status = fs::status(it->path(), status_ec);
    if (status_ec || !fs::exists(status) || fs::is_regular_file(status)) continue;
    refuse(out, "holds '" + name + "', which is " +
                    (fs::is_directory(status) ? "a directory" : "not a regular file") +
                    "; shardsim writes a file at that name (move it away)");
  }
  if (ec) refuse(out, "cannot list the directory: " + ec.message());
}

Checked check_one(const OutputRequest& out) {
  if (out.path.empty()) throw InputError(out.flag + ": needs a path, got an empty one");
  Checked checked{&out, normal_path(out.path), stat_of(out.path)};
  if (!checked.existing) {
    if (errno != ENOENT) refuse(out, std::string("cannot use this path: ") + std::strerror(errno));
    check_parent(out);
    return checked;
  }
  const mode_t mode = checked.existing->st_mode;
  if (out.directory) {
    if (!S_ISDIR(mode)) refuse(out, "exists and is not a directory");
    if (::access(out.path.c_str(), W_OK | X_OK) != 0) refuse(out, "directory is not writable");
    check_written_entries(out);
    return checked;
  }
  if (S_ISDIR(mode)) refuse(out, "is a directory; give a file name");
  if (!S_ISREG(mode)) {
    refuse(out, "is a device, FIFO or socket; shardsim writes only regular files");
  }
  OutputRequest target = out;
  target.path = checked.normal;  // a symlink's target is the file replaced
  check_parent(target);
  return checked;
}

bool same_file(const std::optional<struct stat>& a, const std::optional<struct stat>& b) {
  return a && b && a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

// Whether directory output `dir` writes the file at normalized path `file`.
bool writes_into(const Checked& dir, const std::string& file) {
  if (!dir.request->directory || parent_of(file) != dir.normal) return false;
  return writes_name(*dir.request, file.substr(file.find_last_of('/') + 1));
}

}  // namespace

void check_outputs(const std::vector<OutputRequest>& outputs,
                   const std::vector<std::string>& inputs) {
  std::vector<Checked> checked;
  for (const OutputRequest& out : outputs) checked.push_back(check_one(out));
  for (const std::string& input : inputs) {
    const std::optional<struct stat> input_stat = stat_of(input);
    const std::string input_normal = normal_path(input);
    for (const Checked& out : checked) {
      if (same_file(out.existing, input_stat) || out.normal == input_normal) {
        refuse(*out.request,
               "is an input of this command (" + input + "); refusing to overwrite it");
      }
      if (writes_into(out, input_normal)) {
        refuse(*out.request, "would overwrite the input " + input);
      }
    }
  }
  for (std::size_t i = 0; i < checked.size(); ++i) {
    for (std::size_t j = 0; j < checked.size(); ++j) {
      const Checked& a = checked[i];
      const Checked& b = checked[j];
      if (i < j && (a.normal == b.normal || same_file(a.existing, b.existing))) {
        refuse(*b.request, "is also the path of " + a.request->flag + "; give each output its own");
      }
      if (i != j && writes_into(a, b.normal)) {
        refuse(*b.request, "would be overwritten by the files " + a.request->flag + " " +
                               a.request->path + " writes");
      }
    }
  }
}

}  // namespace shardsim
