// Error types shared by every layer.
//
// InputError is bad user input (scenario file, CLI flag, golden file). The CLI turns it into one
// message on stderr and exit code 2. Its message already carries the location
// ("file:line:col: key.path: what is wrong"). A broken internal invariant is not an InputError:
// it is SHARDSIM_ASSERT, which aborts.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace shardsim {

class InputError : public std::runtime_error {
 public:
  explicit InputError(const std::string& message) : std::runtime_error(message) {}
};

// A broken contract between two internal layers that a test must be able to observe (e.g. a
// boundary that names an oracle tensor no step stored). The CLI reports it as an internal error
// (exit 3); it is never the user's fault.
class InternalError : public std::logic_error {
 public:
  explicit InternalError(const std::string& message) : std::logic_error(message) {}
};

// A collective whose members disagree. In NCCL this would hang; here it is reported with the ranks.
class RendezvousError : public std::runtime_error {
 public:
  explicit RendezvousError(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace shardsim

#define SHARDSIM_ASSERT(cond, msg)                                                         \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::fprintf(stderr, "%s:%d: internal invariant broken: %s (%s)\n", __FILE__, __LINE__, \
                   #cond, msg);                                                            \
      std::abort();                                                                        \
    }                                                                                      \
  } while (0)
