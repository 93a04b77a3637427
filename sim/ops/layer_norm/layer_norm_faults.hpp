// Seeded LayerNorm bugs, for the fault catalogue. Each is a scenario switch that changes the
// SHARDED plan only; the dense oracle never sees them. They exist to prove that the checker
// catches the ways sharded normalization commonly goes wrong.
//
// Where each applies (a fault switched on where it does not apply changes nothing):
//   combine_token_means       row-sharded plan: one mean for every token, all-reduced across
//                             the ranks' token means, instead of each token's own mean
//   rmsnorm_substituted       row-sharded plan: RMSNorm's statistic (no mean; rms) in place of
//                             mean and variance
//   hidden_shard_local_stats  hidden-sharded plans: each rank normalizes its slice of a token
//                             with statistics of that slice alone
//   unbiased_variance         all plans: variance divided by H - 1
//   eps_mismatch              all plans: eps outside the sqrt, rstd = 1 / (sqrt(var) + eps)
//   dtype_mismatch            row-sharded plan: the normalized value is rounded through float
//                             (invisible in an f32 run; a constant gap at f64 and mp)
// The redistribute mode of the hidden-sharded LayerNorm runs the row-sharded plan, so the
// row-plan faults apply there too.
//
// LayerNormFaults is also the policy argument of the LayerNorm kernels (layer_norm.hpp): each
// switch replaces one piece of the header's formula, and the no-fault value LayerNormFaults{} is
// the formula itself. The dense oracle is the same kernel called with LayerNormFaults{}, so a
// fault cannot change the oracle, and the sharded plans cannot drift from it when no fault is on.
// The pieces, and who uses them:
//   centre      layer_norm_stats: each row's own mean; a mean shared by every row
//               (combine_token_means); or 0 (rmsnorm_substituted)
//   variance    layer_norm_stats: sum of squared deviations / variance_divisor(H);
//               the hidden-sharded plans: variance_from_biased(their biased variance)
//   rstd        rstd(var, eps), every plan
//   normalized  layer_norm_apply: round_normalized after (x - mean) * rstd
#pragma once

#include <cmath>
#include <cstdint>

namespace shardsim {

struct LayerNormFaults {
  bool combine_token_means = false;
  bool rmsnorm_substituted = false;
  bool hidden_shard_local_stats = false;
  bool unbiased_variance = false;
  bool eps_mismatch = false;
  bool dtype_mismatch = false;

  // Whether every row is centred on its own mean (the formula). Otherwise it is centred on a
  // mean shared by every row (combine_token_means, which wins) or on 0 (rmsnorm_substituted).
  bool centres_on_own_mean() const { return !combine_token_means && !rmsnorm_substituted; }

  // What a row's sum of squared deviations over `count` features is divided by: count (the
  // biased variance), or count - 1 with unbiased_variance.
  std::int64_t variance_divisor(std::int64_t count) const {
    return unbiased_variance ? count - 1 : count;
  }

  // A biased variance over `count` features, in the convention the faults select: itself, or
  // (var * count) / (count - 1) with unbiased_variance. The hidden-sharded plans finish their
  // statistics as a biased variance, hence this form next to variance_divisor.
  template <typename T>
  T variance_from_biased(const T& var, std::int64_t count) const {
    if (!unbiased_variance) return var;
    return var * T(count) / T(count - 1);
  }

  // rstd = 1 / sqrt(var + eps), or 1 / (sqrt(var) + eps) with eps_mismatch.
  template <typename T>
  T rstd(const T& var, const T& eps) const {
    using std::sqrt;
    return eps_mismatch ? T(T(1) / (sqrt(var) + eps)) : T(T(1) / sqrt(var + eps));
  }

  // The normalized value (x - mean) * rstd as the plan keeps it: unchanged, or rounded through
  // float with dtype_mismatch.
  template <typename T>
  void round_normalized(T& value) const {
    if (dtype_mismatch) value = T(static_cast<float>(value));
  }
};

}  // namespace shardsim
