// The named intermediates of a sliding_window_attention step: one enum and one name table.
//
// A part's boundary name is part_name(OUTPUT, suffix) = "OUTPUT.suffix" (trace.hpp), its
// gradient grad_name of that = "grad(OUTPUT.suffix)". The sharded plans record their boundaries
// under these names and the runner step stores the dense oracle tensors under the same names, so
// both sides are spelt by this table: a misspelt part is a compile error, not an unchecked
// comparison. The suffixes are part of the report and golden format (docs/ops/attention.md,
// "Boundaries, in order").
#pragma once

#include <cstddef>
#include <iterator>
#include <string>
#include <string_view>

#include "core/trace.hpp"

namespace shardsim {

// In the order forward records them; the shapes are the dense (global) ones, with t the chunk
// length and L the cache length read by the chunk.
enum class AttentionPart {
  q,            // (batch, seq=t, head, head_dim) x wq, before RoPE
  k,            // (batch, seq=t, head, head_dim) x wk, before RoPE
  v,            // (batch, seq=t, head, head_dim) x wv
  q_rot,        // (batch, seq=t, head, head_dim) the queries after RoPE
  cache_k,      // (batch, kv=L, head, head_dim) the carried keys (after RoPE)
  cache_v,      // (batch, kv=L, head, head_dim) the carried values
  k_cat,        // (batch, kv=L+t, head, head_dim) cache_k ++ k (chunk keys raw)
  v_shard,      // Shard(kv) of v_all: each rank's slice of cache_v ++ v
  k_shard,      // Shard(kv) of k_all: each rank's slice after RoPE of its own chunk keys
  k_all,        // (batch, kv=L+t, head, head_dim) cache_k ++ rope(k)
  v_all,        // (batch, kv=L+t, head, head_dim) cache_v ++ v
  q_shard,      // ring: Shard(seq) of q_rot
  attn_shard,   // ring: Shard(seq) of attn
  q_heads,      // ulysses: Shard(head) of q_rot
  k_heads,      // ulysses: Shard(head) of k_all
  v_heads,      // ulysses: Shard(head) of v_all
  attn_heads,   // ulysses: Shard(head) of attn
  attn_seq,     // ulysses: Shard(seq) of attn
  lse,          // (batch, seq=t, head) log-sum-exp of the scores
  attn,         // (batch, seq=t, head, head_dim) softmax(scores) v_all
  k_cat_shard,  // backward only: Shard(kv) of grad(k_cat)
  // sequence-sharded queries, from the second streamed chunk on (attention/sharded_plan.hpp):
  k_new,  // (batch, kv=t, head, head_dim) the chunk's keys after RoPE: the last t keys of k_all
  v_new,  // (batch, kv=t, head, head_dim) the chunk's values: the last t values of v_all
  count   // not a part: the number of parts
};

struct AttentionPartRow {
  AttentionPart part;
  std::string_view suffix;
};

// The name table, one row per part in enum order (checked below).
inline constexpr AttentionPartRow kAttentionParts[] = {
    {AttentionPart::q, "q"},
    {AttentionPart::k, "k"},
    {AttentionPart::v, "v"},
    {AttentionPart::q_rot, "q_rot"},
    {AttentionPart::cache_k, "cache_k"},
    {AttentionPart::cache_v, "cache_v"},
    {AttentionPart::k_cat, "k_cat"},
    {AttentionPart::v_shard, "v_shard"},
    {AttentionPart::k_shard, "k_shard"},
    {AttentionPart::k_all, "k_all"},
    {AttentionPart::v_all, "v_all"},
    {AttentionPart::q_shard, "q_shard"},
    {AttentionPart::attn_shard, "attn_shard"},
    {AttentionPart::q_heads, "q_heads"},
    {AttentionPart::k_heads, "k_heads"},
    {AttentionPart::v_heads, "v_heads"},
    {AttentionPart::attn_heads, "attn_heads"},
    {AttentionPart::attn_seq, "attn_seq"},
    {AttentionPart::lse, "lse"},
    {AttentionPart::attn, "attn"},
    {AttentionPart::k_cat_shard, "k_cat_shard"},
    {AttentionPart::k_new, "k_new"},
    {AttentionPart::v_new, "v_new"},
};

namespace detail {

// Every part has exactly one row, at its own index, with a non-empty suffix.
constexpr bool attention_part_table_is_complete() {
  if (std::size(kAttentionParts) != static_cast<std::size_t>(AttentionPart::count)) return false;
  for (std::size_t i = 0; i < std::size(kAttentionParts); ++i) {
    if (static_cast<std::size_t>(kAttentionParts[i].part) != i) return false;
    if (kAttentionParts[i].suffix.empty()) return false;
  }
  return true;
}

}  // namespace detail

static_assert(detail::attention_part_table_is_complete(),
              "kAttentionParts needs one row per AttentionPart, in enum order");

// The part's suffix ("k_all"). REQUIRES: part != AttentionPart::count.
constexpr std::string_view attention_part_suffix(AttentionPart part) {
  return kAttentionParts[static_cast<std::size_t>(part)].suffix;
}

// The boundary name of `part` of the step whose output is `output`: "OUTPUT.suffix".
inline std::string attention_part_name(std::string_view output, AttentionPart part) {
  return part_name(output, attention_part_suffix(part));
}

}  // namespace shardsim
