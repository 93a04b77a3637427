#include "core/fault_list.hpp"

namespace shardsim {

std::optional<Fault> find_fault(std::string_view name) {
  for (std::size_t k = 0; k < kFaultCount; ++k) {
    if (kFaultNames[k] == name) return static_cast<Fault>(k);
  }
  return std::nullopt;
}

}  // namespace shardsim
