#include "ops/op_list.hpp"

namespace shardsim {

std::string op_label(OpKind kind) { return std::string(op_name(kind)); }

std::string backward_label(OpKind kind) { return std::string(op_name(kind)) + "_backward"; }

std::optional<OpKind> find_op(std::string_view name) {
  for (std::size_t k = 0; k < kOpCount; ++k) {
    if (kOpNames[k] == name) return static_cast<OpKind>(k);
  }
  return std::nullopt;
}

}  // namespace shardsim
