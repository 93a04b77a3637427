// The one list of scenario ops, and each op's typed parameters.
//
// An op is declared once, by a row of SHARDSIM_OP_LIST: X(name, Type) gives
//   OpKind::name       the enum every dispatch switches on (a missed case fails -Wswitch);
//   "name"             the op's name in scenario files, reports and goldens (op_name);
//   TypeArgs           its parameters as the scenario loader parsed and validated them, once;
//   TypeStep           the runner's binding of the dense oracle and the sharded plan.
// The loader's schema and shape rules for op `name` are op_entry<OpKind::name>() (scenario
// layer); the runner builds TypeStep in make_step_op's switch. docs/architecture.md "Adding an op"
// lists the files an op touches.
//
// Args hold tensor names and plain values. A string-valued choice (e.g. a LayerNorm's `stats`)
// has been checked against the schema's choices; the step turns it into the kernel's enum once,
// when it is built.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/placement.hpp"

#define SHARDSIM_OP_LIST(X)     \
  X(layer_norm, LayerNorm)      \
  X(rms_norm, RmsNorm)          \
  X(redistribute, Redistribute) \
  X(linear, Linear)             \
  X(gelu, Gelu)                 \
  X(dropout, Dropout)           \
  X(add, Add)                   \
  X(mse_loss, MseLoss)          \
  X(sliding_window_attention, SlidingWindowAttention)

namespace shardsim {

enum class OpKind {
#define SHARDSIM_OP_ENUM(name, Type) name,
  SHARDSIM_OP_LIST(SHARDSIM_OP_ENUM)
#undef SHARDSIM_OP_ENUM
};

inline constexpr std::string_view kOpNames[] = {
#define SHARDSIM_OP_NAME(name, Type) #name,
    SHARDSIM_OP_LIST(SHARDSIM_OP_NAME)
#undef SHARDSIM_OP_NAME
};
inline constexpr std::size_t kOpCount = std::size(kOpNames);

constexpr std::string_view op_name(OpKind kind) { return kOpNames[static_cast<std::size_t>(kind)]; }
// The op label of a boundary the op's forward or backward records ("layer_norm",
// "layer_norm_backward").
std::string op_label(OpKind kind);
std::string backward_label(OpKind kind);
std::optional<OpKind> find_op(std::string_view name);

// ---- Typed parameters, one struct per op (the keys of docs/scenario-format.md) ----

struct LayerNormArgs {
  std::string input;
  std::string output;
  std::optional<std::string> weight;  // shape [axis]
  std::optional<std::string> bias;    // shape [axis]
  std::string axis = "hidden";
  double eps = 1e-5;
  std::optional<std::string> stats;  // sum_sumsq | welford | redistribute (Shard(axis) input)
  std::string token_axis = "seq";    // the redistribute mode's token axis
};

struct RmsNormArgs {
  std::string input;
  std::string output;
  std::optional<std::string> weight;
  std::string axis = "hidden";
  double eps = 1e-5;
};

struct RedistributeArgs {
  std::string input;
  std::string output;
  Placement to;
};

struct LinearArgs {
  std::string input;
  std::string weight;  // [out, in]
  std::optional<std::string> bias;
  std::string output;
  std::optional<std::string> parallel;  // none | column | row: asserts the weight's form
};

struct GeluArgs {
  std::string input;
  std::string output;
  std::string approximate = "none";  // none | tanh
};

struct DropoutArgs {
  std::string input;
  std::string output;
  double p = 0;
  std::optional<std::uint64_t> seed;    // default: the scenario seed
  std::optional<std::uint32_t> stream;  // default: the step index
  std::string policy = "global";        // global | same_seed | rank_offset
};

struct AddArgs {
  std::string input;
  std::string residual;
  std::string output;
};

struct MseLossArgs {
  std::string input;
  std::string target;
  std::string output;
  std::optional<std::vector<std::int64_t>> valid_lengths;
  std::string batch_axis = "batch";
  std::string seq_axis = "seq";
  std::string feature_axis = "hidden";
};

struct SlidingWindowAttentionArgs {
  std::string input;
  std::string wq;
  std::string wk;
  std::string wv;
  std::string wo;
  std::string output;
  std::int64_t n_head = 1;
  std::int64_t head_dim = 2;
  std::optional<std::int64_t> window;  // none: plain causal
  double rope_theta = 10000.0;
  std::string rope = "rotate_half";   // rotate_half | interleaved
  std::string cp_mode = "allgather";  // allgather | ring | ulysses
};

// std::monostate (not parsed yet), then one alternative per op in OpKind order.
using OpArgs = std::variant<std::monostate
#define SHARDSIM_OP_ARGS(name, Type) , Type##Args
                                SHARDSIM_OP_LIST(SHARDSIM_OP_ARGS)
#undef SHARDSIM_OP_ARGS
                            >;
static_assert(std::variant_size_v<OpArgs> == kOpCount + 1, "one Args struct per op");

}  // namespace shardsim
