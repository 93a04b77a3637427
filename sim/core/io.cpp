#include "core/io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>

#include "core/error.hpp"

namespace shardsim {
namespace {

// ---------------------------------------------------------------------------------------------
// Interruption. The temporary files of the write in progress are published to the signal
// handler through lock-free atomics: an array of NUL-terminated paths, its length, and an
// optional directory to rmdir. The handler only calls unlink, rmdir, signal and raise, all
// async-signal-safe (POSIX.1-2008 2.4.3). Publication order: the array is fully built before
// g_paths is stored; the handler is cleared (count 0, pointers null) before the array is freed.

std::atomic<const char* const*> g_paths{nullptr};
std::atomic<std::size_t> g_count{0};
std::atomic<const char*> g_dir{nullptr};
static_assert(std::atomic<std::size_t>::is_always_lock_free);
static_assert(std::atomic<const char*>::is_always_lock_free);

extern "C" void shardsim_unlink_and_reraise(int sig) {
  const char* const* paths = g_paths.load();
  const std::size_t count = g_count.load();
  if (paths != nullptr) {
    for (std::size_t i = 0; i < count; ++i) ::unlink(paths[i]);
  }
  if (const char* dir = g_dir.load()) ::rmdir(dir);  // only succeeds when empty
  ::signal(sig, SIG_DFL);
  ::raise(sig);  // delivered when the handler returns (sig is blocked while it runs)
}

// Installs the handler for SIGINT, SIGTERM, SIGHUP (the terminal closed) and SIGQUIT (Ctrl-\)
// once, leaving a signal alone when it is ignored (nohup) or already has another handler.
void install_handlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (const int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) {
      struct sigaction previous {};
      if (::sigaction(sig, nullptr, &previous) != 0) continue;
      if ((previous.sa_flags & SA_SIGINFO) != 0 || previous.sa_handler != SIG_DFL) continue;
      struct sigaction action {};
      action.sa_handler = shardsim_unlink_and_reraise;
      sigemptyset(&action.sa_mask);
      action.sa_flags = 0;
      ::sigaction(sig, &action, nullptr);
    }
  });
}

// Registers temporary paths (and a directory) with the handler for its lifetime.
class PendingTemps {
 public:
  PendingTemps(const std::vector<std::string>& temps, const std::string& dir)
      : temps_(temps), dir_(dir), array_(std::make_unique<const char*[]>(temps.size() + 1)) {
    install_handlers();
    for (std::size_t i = 0; i < temps_.size(); ++i) array_[i] = temps_[i].c_str();
    g_count.store(0);
    g_paths.store(array_.get());
    g_count.store(temps_.size());
    if (!dir_.empty()) g_dir.store(dir_.c_str());
  }
  ~PendingTemps() {
    g_count.store(0);
    g_dir.store(nullptr);
    g_paths.store(nullptr);
  }
  PendingTemps(const PendingTemps&) = delete;
  PendingTemps& operator=(const PendingTemps&) = delete;

  // Removes every temporary file and, when registered, the directory if it is empty.
  void remove_all() const {
    for (const std::string& temp : temps_) ::unlink(temp.c_str());
    if (!dir_.empty()) ::rmdir(dir_.c_str());
  }

 private:
  std::vector<std::string> temps_;
  std::string dir_;
  std::unique_ptr<const char*[]> array_;
};

// Writes and fsyncs one file; on failure throws InputError naming `path` (the final name).
void write_and_sync(const std::string& temp, const std::string& path, std::string_view bytes) {
  auto fail = [&](const std::string& what) {
    throw InputError(path + ": cannot write" + what + ": " + std::strerror(errno));
  };
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(" (creating a temporary file)");
  std::size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int saved = errno;
      ::close(fd);
      errno = saved;
      fail("");
    }
    written += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int saved = errno;
    ::close(fd);
    errno = saved;
    fail(" (fsync)");
  }
  if (::close(fd) != 0) fail(" (close)");
}

// The file a write to `path` replaces: the target of a symlink at `path` (so that writing
// through a link updates the file it points to instead of replacing the link), else `path`.
std::string write_target(const std::string& path) {
  struct stat info {};
  if (::lstat(path.c_str(), &info) != 0 || !S_ISLNK(info.st_mode)) return path;
  std::error_code ec;
  const std::filesystem::path target = std::filesystem::weakly_canonical(path, ec);
  return ec ? path : target.string();
}

}  // namespace

void write_files_atomically(const std::vector<std::pair<std::string, std::string_view>>& input,
                            const std::string& remove_dir_if_empty) {
  std::vector<std::pair<std::string, std::string_view>> files;
  std::vector<std::string> temps;
  files.reserve(input.size());
  temps.reserve(input.size());
  for (const auto& [path, bytes] : input) {
    files.emplace_back(write_target(path), bytes);
    temps.push_back(files.back().first + ".tmp." + std::to_string(::getpid()));
  }
  PendingTemps pending(temps, remove_dir_if_empty);
  try {
    for (std::size_t i = 0; i < files.size(); ++i) {
      write_and_sync(temps[i], files[i].first, files[i].second);
    }
    for (std::size_t i = 0; i < files.size(); ++i) {
      if (::rename(temps[i].c_str(), files[i].first.c_str()) != 0) {
        throw InputError(files[i].first + ": cannot write (rename): " + std::strerror(errno));
      }
    }
  } catch (...) {
    pending.remove_all();
    throw;
  }
}

void write_file_atomically(const std::string& path, std::string_view bytes) {
  write_files_atomically({{path, bytes}});
}

}  // namespace shardsim
