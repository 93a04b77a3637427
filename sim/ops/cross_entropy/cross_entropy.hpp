// Cross-entropy over a vocabulary (PyTorch's F.cross_entropy with ignore_index and
// label_smoothing, plus PaLM's z-loss), split into the per-token parts a vocabulary-parallel
// program computes (docs/ops/language-model.md). For token t with logits x[t, 0..C) and label y:
//   M = max_c x_c                      ("loss.max")
//   S = sum_c exp(x_c - M)             ("loss.sumexp", classes in ascending order)
//   X = x_y                            ("loss.target_logit")
//   A = sum_c x_c                      ("loss.logit_sum", label smoothing only)
//   lse = log(S) + M                   ("loss.lse")
//   l = lse - (1 - eps) X - (eps / C) A + z lse^2
// (PyTorch's label smoothing: (1 - eps) (lse - X) + (eps / C) sum_c (lse - x_c)). A token whose
// label is ignore_index contributes nothing; the loss is sum_t l_t / V, V the global count of
// the step's non-ignored tokens, divided once. Backward, on every column c of a counted token:
//   dx_c = (p_c (1 + 2 z lse) - (1 - eps) [c = y] - eps / C) / V,   p_c = exp(x_c - M) / S.
//
// The kernels below see one tensor's local columns: the logits viewed as [tokens, local], the
// vocabulary the last axis. Local columns [0, valid) are the global classes [begin, begin +
// valid); the rest are a padded split's padding, which never enter a max, a sum or a gradient
// (unless `with_pad`: the vocab_padding_in_softmax fault). The dense oracle calls them with every
// class, begin = 0.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "core/tensor.hpp"
#include "ops/token_ids.hpp"

namespace shardsim {

struct VocabColumns {
  std::int64_t begin = 0;  // the global class of local column 0
  std::int64_t valid = 0;  // real columns; [valid, local extent) is padding
};

// A token's label as the kernels read it: a class, the ignore_index, or kPadToken (token_ids.hpp)
// for a padded split's padding token (not a token at all: never counted, even by a fault).

struct CrossEntropyParams {
  std::int64_t ignore_index = -100;
  double label_smoothing = 0.0;
  double z_loss = 0.0;
  std::int64_t vocab = 0;  // C, the global number of classes

  bool counts(std::int64_t label) const { return label != ignore_index && label != kPadToken; }
};

// m[t] = max of row t's real columns (every column with `with_pad`); -inf for a row with none.
// m has one element per row.
template <typename T>
void ce_row_max(const Tensor<T>& x, const VocabColumns& cols, bool with_pad, Tensor<T>& m);

// s[t] = sum over row t's real columns, ascending, of exp(x - max[t]).
template <typename T>
void ce_row_sumexp(const Tensor<T>& x, const VocabColumns& cols, bool with_pad, const Tensor<T>& max,
                   Tensor<T>& s);

// target[t] = x[t, labels[t] - begin] when this tensor holds class labels[t], else 0 (Megatron's
// masked gather). `unmasked` (the ce_target_every_rank fault): a rank that does not hold the
// class reads local column 0 instead of 0, as Megatron's vocab-parallel cross-entropy does when
// it forgets predicted_logits[target_mask] = 0.
template <typename T>
void ce_row_target(const Tensor<T>& x, const VocabColumns& cols,
                   const std::vector<std::int64_t>& labels, const CrossEntropyParams& params,
                   bool unmasked, Tensor<T>& target);

// a[t] = sum over row t's real columns, ascending, of x.
template <typename T>
void ce_row_sum(const Tensor<T>& x, const VocabColumns& cols, Tensor<T>& a);

// lse[t] = log(s[t]) + max[t]; loss[t] = l_t above for a counted token, 0 otherwise. `a` is read
// only with label smoothing.
template <typename T>
void ce_token_loss(const Tensor<T>& max, const Tensor<T>& s, const Tensor<T>& target,
                   const Tensor<T>& a, const std::vector<std::int64_t>& labels,
                   const CrossEntropyParams& params, Tensor<T>& lse, Tensor<T>& loss);

// The sum of loss over the counted tokens in flat order, starting from `sum` (carried), and how
// many tokens were counted (added to `count`). `count_ignored` (ce_ignored_tokens_counted): the
// ignored tokens are counted too.
template <typename T>
void ce_sum_tokens(const Tensor<T>& loss, const std::vector<std::int64_t>& labels,
                   const CrossEntropyParams& params, bool count_ignored, T& sum,
                   std::int64_t& count);

// dx (written, x's shape): the backward above divided by `divisor`, 0 on padding columns and on
// every column of a token that is not counted.
template <typename T>
void ce_backward(const Tensor<T>& x, const VocabColumns& cols, const std::vector<std::int64_t>& labels,
                 const Tensor<T>& max, const Tensor<T>& s, const Tensor<T>& lse,
                 const CrossEntropyParams& params, bool with_pad, const T& divisor, Tensor<T>& dx);

}  // namespace shardsim
