// The lab's Mp engine, in its own translation unit (invariant 6 in docs/architecture.md).
#include "core/mp.hpp"
#include "lab/lab-inl.hpp"

namespace shardsim::detail {

namespace {

// MPFR reads the decimal and rounds it once to the current precision.
Mp parse_mp(std::string_view text) {
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  return Mp(std::string(text));
}

// Enough digits to identify the value, trailing zeros dropped (0.25, not 0.2500...).
std::string print_mp(const Mp& value) { return value.str(0, std::ios_base::fmtflags(0)); }

}  // namespace

std::unique_ptr<LabEngine> make_lab_engine_mp(unsigned bits) {
  set_mp_precision(bits);
  return std::make_unique<LabEngineT<Mp>>(&parse_mp, &print_mp);
}

}  // namespace shardsim::detail
