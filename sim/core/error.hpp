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

// User text on a terminal. Input can be anything, so what a terminal would act on is escaped:
// the C0 controls and DEL as \xNN (a newline as \n), the C1 controls U+0080-U+009F (UTF-8
// C2 80-9F; U+009B is a CSI on some terminals) and the bidirectional overrides and isolates
// U+202A-U+202E, U+2066-U+2069 (which reorder what follows them on the line) as \uNNNN, and a
// byte that does not belong to a well-formed UTF-8 sequence as \xNN (a lone 0x9B is a CSI on a
// terminal in 8-bit mode). With `keep_lines`, newlines and tabs pass (a multi-line description).
inline std::string escaped(std::string_view text, bool keep_lines = false) {
  static constexpr char kHex[] = "0123456789abcdef";
  // The length of the well-formed UTF-8 sequence at `at` (2 to 4 bytes), or 0 when there is none
  // (Unicode's table 3-7: no overlong forms, no surrogates, nothing above U+10FFFF).
  auto sequence = [&](std::size_t at) -> std::size_t {
    const auto byte = [&](std::size_t k) {
      return at + k < text.size() ? static_cast<unsigned char>(text[at + k]) : 0;
    };
    const unsigned char lead = byte(0);
    std::size_t length = 0;
    unsigned char low = 0x80, high = 0xBF;  // the second byte's range
    if (lead >= 0xC2 && lead <= 0xDF) {
      length = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      length = 3;
      if (lead == 0xE0) low = 0xA0;
      if (lead == 0xED) high = 0x9F;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      length = 4;
      if (lead == 0xF0) low = 0x90;
      if (lead == 0xF4) high = 0x8F;
    } else {
      return 0;
    }
    if (byte(1) < low || byte(1) > high) return 0;
    for (std::size_t k = 2; k < length; ++k) {
      if (byte(k) < 0x80 || byte(k) > 0xBF) return 0;
    }
    return length;
  };
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const unsigned char c1 = i + 1 < text.size() ? static_cast<unsigned char>(text[i + 1]) : 0;
    const unsigned char c2 = i + 2 < text.size() ? static_cast<unsigned char>(text[i + 2]) : 0;
    if (keep_lines && (c == '\n' || c == '\t')) {
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    } else if (c == 0xC2 && c1 >= 0x80 && c1 <= 0x9F) {  // U+0080-U+009F
      out += "\\u00";
      out += kHex[c1 >> 4];
      out += kHex[c1 & 0xf];
      ++i;
    } else if (c == 0xE2 && ((c1 == 0x80 && c2 >= 0xAA && c2 <= 0xAE) ||
                             (c1 == 0x81 && c2 >= 0xA6 && c2 <= 0xA9))) {
      const unsigned code = 0x2000u + ((c1 & 0x3fu) << 6) + (c2 & 0x3fu);  // U+202A-E, 2066-9
      out += "\\u";
      for (int shift = 12; shift >= 0; shift -= 4) out += kHex[(code >> shift) & 0xf];
      i += 2;
    } else if (c < 0x80) {
      out += static_cast<char>(c);
    } else if (const std::size_t length = sequence(i); length > 0) {
      out.append(text.substr(i, length));
      i += length - 1;
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    }
  }
  return out;
}

// User text in a message. Input can be anything (a 100 MB key, a newline in a name), yet a
// message stays one short line: what a terminal would act on is escaped (escaped() above) and
// text longer than kQuoteLimit bytes is cut there (never inside a UTF-8 sequence) and ends with
// "…".
inline constexpr std::size_t kQuoteLimit = 80;

inline std::string clipped(std::string_view text) {
  std::size_t cut = text.size();
  if (cut > kQuoteLimit) {
    cut = kQuoteLimit;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  }
  std::string out = escaped(text.substr(0, cut));
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
