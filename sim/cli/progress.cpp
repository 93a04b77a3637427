#include "cli/progress.hpp"

#include <unistd.h>

#include <cstdio>
#include <utility>

namespace shardsim::cli {

ProgressLine::ProgressLine(bool wanted)
    : enabled_(wanted && ::isatty(STDOUT_FILENO) == 1 && ::isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()) {}

std::function<void(const TraceEntry&)> ProgressLine::for_run(std::string precision) {
  if (!enabled_) return {};
  return
      [this, precision = std::move(precision)](const TraceEntry& entry) { draw(precision, entry); };
}

void ProgressLine::draw(const std::string& precision, const TraceEntry& entry) {
  const auto now = std::chrono::steady_clock::now();
  if (shown_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  shown_ = true;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const std::string at = precision.empty() ? std::string() : precision + " ";
  // "\r\033[K": back to the start of the line and erase it; the text is cut to 100 columns.
  std::string line = at + "step " + std::to_string(entry.step) + " chunk " +
                     std::to_string(entry.chunk) + " boundary #" + std::to_string(entry.id) + " " +
                     entry.op + " -> " + entry.tensor;
  if (line.size() > 80) line.resize(80);
  std::fprintf(stderr, "\r\033[Kshardsim: %s  %.1f s", line.c_str(), elapsed);
  std::fflush(stderr);
}

void ProgressLine::clear() {
  if (!shown_) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  shown_ = false;
}

}  // namespace shardsim::cli
