// The one list of seeded faults: bugs a scenario can switch on (`faults = [...]`) to prove that
// the checker catches them. A fault changes the sharded program only, never the dense oracle.
//
// A fault is declared once, by a row of SHARDSIM_FAULT_LIST; its summary and the ops it applies
// to are its row in the scenario layer's fault catalogue (fault_catalogue()), which the loader
// uses to refuse a fault that applies to no op of the scenario.
#pragma once

#include <cstddef>
#include <iterator>
#include <optional>
#include <string_view>

#define SHARDSIM_FAULT_LIST(X)      \
  X(combine_token_means)            \
  X(rmsnorm_substituted)            \
  X(hidden_shard_local_stats)       \
  X(unbiased_variance)              \
  X(eps_mismatch)                   \
  X(unreduced_param_grads)          \
  X(loss_averaged_twice)            \
  X(average_of_rank_means)          \
  X(padding_in_loss)                \
  X(dtype_mismatch)                 \
  X(ones_init_assumed)              \
  X(wrong_axis)                     \
  X(dropout_same_seed)              \
  X(dropout_rank_offset)            \
  X(cache_raw_k)                    \
  X(rope_local_positions)           \
  X(window_off_by_one)              \
  X(rope_after_gather_wrong_offset) \
  X(grad_reduce_mean)               \
  X(grad_reduce_wrong_dim)          \
  X(row_bias_every_rank)            \
  X(column_backward_unreduced)      \
  X(gather_wrong_axis)              \
  X(ring_merge_no_max)              \
  X(ring_merge_average)             \
  X(ring_backward_local_lse)        \
  X(mask_local_query_positions)     \
  X(mask_zigzag_contiguous)         \
  X(micro_batch_mean)               \
  X(fsdp_grad_averaged)             \
  X(fsdp_grad_local_mean)           \
  X(fsdp_full_param_step)           \
  X(fsdp_clip_padding)              \
  X(fsdp_stale_shard)               \
  X(fsdp_reduce_dtype_bf16)         \
  X(ce_local_max)                   \
  X(ce_target_every_rank)           \
  X(ce_ignored_tokens_counted)      \
  X(vocab_padding_in_softmax)       \
  X(embedding_partial_not_reduced)  \
  X(tied_grad_one_use)              \
  X(adamw_bias_correction_missing)  \
  X(adamw_decay_coupled)            \
  X(gqa_wrong_group)                \
  X(gqa_kv_grad_unreduced)

namespace shardsim {

enum class Fault {
#define SHARDSIM_FAULT_ENUM(name) name,
  SHARDSIM_FAULT_LIST(SHARDSIM_FAULT_ENUM)
#undef SHARDSIM_FAULT_ENUM
};

inline constexpr std::string_view kFaultNames[] = {
#define SHARDSIM_FAULT_NAME(name) #name,
    SHARDSIM_FAULT_LIST(SHARDSIM_FAULT_NAME)
#undef SHARDSIM_FAULT_NAME
};
inline constexpr std::size_t kFaultCount = std::size(kFaultNames);

constexpr std::string_view fault_name(Fault fault) {
  return kFaultNames[static_cast<std::size_t>(fault)];
}
std::optional<Fault> find_fault(std::string_view name);

}  // namespace shardsim
