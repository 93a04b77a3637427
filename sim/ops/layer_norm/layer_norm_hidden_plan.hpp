// Hidden-sharded LayerNorm: the input is Shard(axis) on the normalized axis, so no rank holds a
// whole row and the row statistics must be distributed. Three selectable plans (step key
// `stats`), each compared with the dense oracle:
//
//   sum_sumsq     each rank sums x and x^2 over its slice of every row; both are all-reduced
//                 ("<out>.sum", "<out>.sumsq");
//                 mean = S / H, var = max(SS / H - mean^2, 0), rstd = 1 / sqrt(var + eps).
//                 CANCELLATION RISK: SS / H and mean^2 are both about mean^2 when |mean| >> std,
//                 so their difference loses about 2 log2(|mean| / std) bits. In f32 with
//                 mean 1e4 and std 1 the two terms are ~1e8, whose ulp is 8: the variance (1) is
//                 pure rounding noise, possibly 0 or negative (hence the clamp). The two-pass
//                 dense oracle and the welford plan do not have this problem.
//   welford       each rank forms (count, mean, M2) of its slice (two-pass), the triples are
//                 all-gathered ("<out>.moments", [rows..., shard=k, moment=3]) and every rank
//                 merges them in rank order 0, 1, ..., k-1 with Chan et al.'s formula
//                 (welford_merge), identically; var = M2 / H.
//   redistribute  all-to-all Shard(axis) -> Shard(token_axis) ("<x>@<token_axis>"), gather
//                 weight and bias ("<w>@gathered"), the row-sharded plan (bitwise the dense
//                 arithmetic), all-to-all back. Moving data is exact, so every boundary of this
//                 plan claims exactness.
//
// Placements: weight and bias are Shard(axis) with the input's split; each rank holds the slice
// matching its features. Their gradients then need a reduction over tokens only, and every rank
// holds all tokens of its features, so sum_sumsq and welford produce dweight/dbias as
// Shard(axis) with no cross-rank sum (dbias is the dense row-order sum of dy: exact). The
// redistribute plan produces Partial(sum) shares over its token slices; the runner
// reduce-scatters them to Shard(axis) before the update.
//
// Backward (sum_sumsq and welford): the two row reductions of the LayerNorm backward,
// sum(dnorm) and sum(dnorm * norm), are partial per rank and all-reduced
// ("grad(<out>).sum_dnorm", "grad(<out>).sum_dnorm_norm"); then each rank forms dx on its slice.
//
// Statistics that are summed across ranks are a reordered arithmetic: nothing of sum_sumsq or
// welford claims exactness; at mp<bits> they agree with the oracle to about 2^-(bits-16).
//
// Every boundary name above is built by part_name / moved_name (trace.hpp) from the constants
// in layer_norm_parts (layer_norm.hpp). The forward plan is in layer_norm_hidden_forward.hpp,
// the backward in layer_norm_hidden_backward.hpp; this header brings in both.
#pragma once

#include "ops/layer_norm/layer_norm_hidden_backward.hpp"
#include "ops/layer_norm/layer_norm_hidden_forward.hpp"
