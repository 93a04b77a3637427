// The one-line progress display of long runs: on a terminal, one stderr line rewritten in place
// with the precision, the step, chunk and boundary being recorded, and the elapsed time. Silent
// when stdout or stderr is not a terminal, or with --quiet, so that pipes, files and tests see
// exactly what they saw without it. The line is erased when the run ends.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "core/trace.hpp"

namespace shardsim::cli {

class ProgressLine {
 public:
  // Shows anything only when `wanted` and both stdout and stderr are terminals.
  explicit ProgressLine(bool wanted);
  ~ProgressLine() { clear(); }
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  bool enabled() const { return enabled_; }
  // The callback for RunOptions::on_boundary while a run at `precision` ("" when the caller
  // runs several) is going on; nothing when disabled. The line is redrawn at most ten times a
  // second.
  std::function<void(const TraceEntry&)> for_run(std::string precision);
  // Erases the line (after a run, before anything else is printed).
  void clear();

 private:
  void draw(const std::string& precision, const TraceEntry& entry);

  bool enabled_ = false;
  bool shown_ = false;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace shardsim::cli
