// The fault catalogue: each fault's summary and the ops whose plans it changes, in Fault order
// (fault_list.hpp). The loader refuses a fault that applies to no op of the scenario.
#include "core/error.hpp"
#include "scenario/scenario.hpp"

namespace shardsim {

// Rows are {fault, name (filled in from fault_list.hpp), summary, ops}.
const std::vector<FaultInfo>& fault_catalogue() {
  static const std::vector<FaultInfo> faults = [] {
    std::vector<FaultInfo> rows = {
        {Fault::combine_token_means,
         "",
         "layer_norm (row-sharded): one mean for all tokens, all-reduced across the ranks' token "
         "means, instead of each token's own",
         {OpKind::layer_norm}},
        {Fault::rmsnorm_substituted,
         "",
         "layer_norm (row-sharded): RMSNorm's statistic (no mean subtracted) where LayerNorm is "
         "specified",
         {OpKind::layer_norm}},
        {Fault::hidden_shard_local_stats,
         "",
         "layer_norm (Shard(hidden)): each rank normalizes its slice of a token with the slice's "
         "own statistics",
         {OpKind::layer_norm}},
        {Fault::unbiased_variance,
         "",
         "layer_norm: variance divided by H - 1 instead of H",
         {OpKind::layer_norm}},
        {Fault::eps_mismatch,
         "",
         "layer_norm: eps outside the sqrt, rstd = 1 / (sqrt(var) + eps)",
         {OpKind::layer_norm}},
        {Fault::unreduced_param_grads,
         "",
         "each replica of a Replicate parameter steps with its own rank's Partial gradient; the "
         "replica check fails",
         {}},
        {Fault::loss_averaged_twice,
         "",
         "mse_loss: divided by the world size as well as by the count",
         {OpKind::mse_loss}},
        {Fault::average_of_rank_means,
         "",
         "mse_loss: mean over ranks of each rank's own mean (wrong under uneven shards or "
         "padding)",
         {OpKind::mse_loss}},
        {Fault::padding_in_loss,
         "",
         "mse_loss: ignores valid_lengths, padding tokens enter the loss",
         {OpKind::mse_loss}},
        {Fault::dtype_mismatch,
         "",
         "layer_norm (row-sharded): normalized output rounded through f32 inside an f64/mp run",
         {OpKind::layer_norm}},
        {Fault::ones_init_assumed,
         "",
         "the sharded program re-initializes parameters named as a step's weight to ones and "
         "bias to zeros, trusting default init",
         {OpKind::layer_norm, OpKind::rms_norm, OpKind::linear}},
        {Fault::wrong_axis,
         "",
         "mse_loss: the padding mask is laid out [seq, batch] while the tokens are [batch, seq]",
         {OpKind::mse_loss}},
        {Fault::dropout_same_seed,
         "",
         "dropout: every rank draws its mask from its local element index with the same seed, so "
         "equally shaped shards repeat each other's masks (the repetition check names the ranks)",
         {OpKind::dropout}},
        {Fault::dropout_rank_offset,
         "",
         "dropout: Megatron-style per-rank seed (seed + 2718 + rank) on local indices: masks "
         "differ across ranks but are not the dense mask",
         {OpKind::dropout}},
        {Fault::cache_raw_k,
         "",
         "sliding_window_attention: the KV cache keeps K before RoPE; chunk 1 passes, the cache "
         "carried into chunk 2 diverges",
         {OpKind::sliding_window_attention}},
        {Fault::rope_local_positions,
         "",
         "sliding_window_attention: each KV shard rotates its chunk keys at shard-local positions "
         "(0, 1, ...) instead of their absolute ones",
         {OpKind::sliding_window_attention}},
        {Fault::window_off_by_one,
         "",
         "sliding_window_attention: the mask allows q_pos - k_pos <= window (one key too many)",
         {OpKind::sliding_window_attention}},
        {Fault::rope_after_gather_wrong_offset,
         "",
         "sliding_window_attention (cp_mode allgather): RoPE once on the gathered keys, at "
         "positions offset by the cache length twice; chunk 1 passes",
         {OpKind::sliding_window_attention}},
        {Fault::grad_reduce_mean,
         "",
         "the gradient all-reduce of a replicated parameter averages over the group (divides by "
         "its size) instead of summing",
         {}},
        {Fault::grad_reduce_wrong_dim,
         "",
         "the gradient all-reduce of a replicated parameter runs over another mesh dim where the "
         "parameter is Replicate (e.g. tp instead of dp): it sums identical copies there and "
         "leaves "
         "the Partial dim unreduced (needs a mesh of two or more dims)",
         {}},
        {Fault::row_bias_every_rank,
         "",
         "linear (row-parallel): every member of the group adds the bias to its Partial sum, so "
         "the reduced output carries it group-size times",
         {OpKind::linear}},
        {Fault::column_backward_unreduced,
         "",
         "linear (column-parallel): Megatron's f without its backward all-reduce; each member "
         "keeps its Partial share of grad(x) as if it were the whole gradient",
         {OpKind::linear}},
        {Fault::gather_wrong_axis,
         "",
         "redistribute (Shard -> Replicate): the all-gather concatenates the members' buffers "
         "along the first axis (batch) instead of the sharded axis, then reads the result as the "
         "global shape",
         {OpKind::redistribute}},
        {Fault::ring_merge_no_max,
         "",
         "sliding_window_attention (ring): the log-sum-exp merge of block results without "
         "subtracting the running max; exp overflows at large logits (f32: lse > 88.7)",
         {OpKind::sliding_window_attention}},
        {Fault::ring_merge_average,
         "",
         "sliding_window_attention (ring): block outputs averaged instead of weighted by their "
         "log-sum-exp",
         {OpKind::sliding_window_attention}},
        {Fault::ring_backward_local_lse,
         "",
         "sliding_window_attention (ring) backward: each KV block's probabilities normalized by "
         "the block's own log-sum-exp instead of the merged (global) one",
         {OpKind::sliding_window_attention}},
        {Fault::mask_local_query_positions,
         "",
         "sliding_window_attention (sequence-sharded queries): each cp rank masks with its "
         "queries' local row indices instead of their global positions",
         {OpKind::sliding_window_attention}},
        {Fault::mask_zigzag_contiguous,
         "",
         "sliding_window_attention (zigzag-sharded queries, allgather or ring): each cp rank "
         "masks its second zigzag piece as if it followed the first (first piece's offset + "
         "local index)",
         {OpKind::sliding_window_attention}},
        {Fault::micro_batch_mean,
         "",
         "mse_loss (micro_batches >= 2): each micro-batch's loss is the mean over its own valid "
         "tokens, divided by the number of micro-batches, instead of its sum over the whole "
         "step's valid-token count (wrong when micro-batches hold different valid counts)",
         {OpKind::mse_loss}},
        {Fault::fsdp_grad_averaged,
         "",
         "fsdp: the gradient reduce-scatter averages over the fsdp group (FSDP's default "
         "divide-by-world-size) although the loss already divides by the global valid-token "
         "count: the 1/dp scaling applied twice",
         {}},
        {Fault::fsdp_grad_local_mean,
         "",
         "fsdp (mse_loss): each rank's backward starts from the mean over its own tokens "
         "(PyTorch's default reduction) while the reduce-scatter sums: the 1/dp scaling is "
         "missing, gradients N/N_r (dp with equal shards) times too large",
         {OpKind::mse_loss}},
        {Fault::fsdp_full_param_step,
         "",
         "fsdp: the optimizer steps the full gathered parameter on every rank with that rank's "
         "own unreduced gradient instead of the reduced local shard; the copies drift apart",
         {}},
        {Fault::fsdp_clip_padding,
         "",
         "fsdp flat + clip_grad_norm: the flat gradient buffer is allocated uninitialized, its "
         "padding left holding garbage (modelled as 1 per rank), and the clipping norm is taken "
         "over the padded buffer",
         {}},
        {Fault::fsdp_stale_shard,
         "",
         "fsdp: the update is not written back before the next all-gather, which reads each "
         "shard as it was before the previous step's update",
         {}},
        {Fault::fsdp_reduce_dtype_bf16,
         "",
         "fsdp: the gradient reduce-scatter runs in bf16 (each addend and each hop's partial "
         "sum rounded to bf16) although the scenario's reduce_dtype is wider (f32)",
         {}},
        {Fault::ce_local_max,
         "",
         "cross_entropy (vocab-parallel): each rank's log-sum-exp uses its own maximum, never "
         "all-reduced",
         {OpKind::cross_entropy}},
        {Fault::ce_target_every_rank,
         "",
         "cross_entropy (vocab-parallel): a rank that does not hold the target class adds its "
         "first column's logit instead of 0 (predicted_logits[target_mask] = 0 forgotten)",
         {OpKind::cross_entropy}},
        {Fault::ce_ignored_tokens_counted,
         "",
         "cross_entropy: the mean's denominator counts the tokens labelled ignore_index",
         {OpKind::cross_entropy}},
        {Fault::vocab_padding_in_softmax,
         "",
         "cross_entropy (vocab-parallel, padded split): the padded vocabulary columns enter the "
         "max and the sum of exponentials",
         {OpKind::cross_entropy}},
        {Fault::embedding_partial_not_reduced,
         "",
         "embedding (vocab-parallel): each rank's masked lookup (zeros for the ids it does not "
         "hold) is used as the output, without the all-reduce or reduce-scatter",
         {OpKind::embedding}},
        {Fault::tied_grad_one_use,
         "",
         "a parameter two steps use (tied embedding and LM head): its gradient keeps only the "
         "last contribution backward reaches instead of the sum of both uses",
         {}},
        {Fault::adamw_bias_correction_missing,
         "",
         "adamw: the ranks step without bias correction (lr * m / (sqrt(v) + eps) with the raw "
         "moments), a step 1 / (1 - beta1) times too large at step 1",
         {}},
        {Fault::adamw_decay_coupled,
         "",
         "adamw: the ranks add weight_decay * param to the gradient (Adam's L2) instead of "
         "decaying the parameter by lr * weight_decay (decoupled)",
         {}},
        {Fault::gqa_wrong_group,
         "",
         "gqa_attention: query head h reads kv head h % n_kv_head instead of h / (n_head / "
         "n_kv_head)",
         {OpKind::gqa_attention}},
        {Fault::gqa_kv_grad_unreduced,
         "",
         "gqa_attention (heads over tp, wk and wv Replicate): each rank's share of the shared kv "
         "heads' gradient is taken as the whole, never summed over the ranks that share them",
         {OpKind::gqa_attention}},
    };
    SHARDSIM_ASSERT(rows.size() == kFaultCount, "one catalogue row per fault");
    for (std::size_t k = 0; k < rows.size(); ++k) {
      SHARDSIM_ASSERT(rows[k].fault == static_cast<Fault>(k), "catalogue rows in Fault order");
      rows[k].name = std::string(fault_name(rows[k].fault));
    }
    return rows;
  }();
  return faults;
}

}  // namespace shardsim
