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
#include <string_view>

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

// User text in a message. Input can be anything (a 100 MB key, a newline in a name), yet a
// message stays one short line: control characters are escaped (\n, \xNN) and text longer than
// kQuoteLimit bytes is cut there (never inside a UTF-8 sequence) and ends with "…".
inline constexpr std::size_t kQuoteLimit = 80;

inline std::string clipped(std::string_view text) {
  std::size_t cut = text.size();
  if (cut > kQuoteLimit) {
    cut = kQuoteLimit;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  }
  std::string out;
  for (std::size_t i = 0; i < cut; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (cut < text.size()) out += "\u2026";  // …
  return out;
}

// 'text', clipped. (Not "quoted": ADL would find std::quoted for a std::string.)
inline std::string quote(std::string_view text) { return "'" + clipped(text) + "'"; }

}  // namespace shardsim

#define SHARDSIM_ASSERT(cond, msg)                                                         \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::fprintf(stderr, "%s:%d: internal invariant broken: %s (%s)\n", __FILE__, __LINE__, \
                   #cond, msg);                                                            \
      std::abort();                                                                        \
    }                                                                                      \
  } while (0)
