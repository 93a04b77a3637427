// Token embedding (torch.nn.Embedding without padding_idx or max_norm): y[t, :] = W[id_t, :] for
// the weight W [vocab, hidden]. Backward is a scatter-add into W's rows:
//   dW[v, :] = sum over the tokens t with id_t = v, in ascending order of t, of dy[t, :]
// (the documented order for repeated ids: a token's rows are added in the flat order of the
// tokens as the tensor holding them lists them).
//
// The kernels see one tensor's rows of W: rows [0, valid) are the vocabulary rows [begin, begin +
// valid) (a vocab-parallel rank's), the rest a padded split's padding. A token whose id is not in
// the range looks up zeros (Megatron's VocabParallelEmbedding masks it) and adds nothing to dW.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.hpp"
#include "ops/token_ids.hpp"

namespace shardsim {

struct VocabRows {
  std::int64_t begin = 0;
  std::int64_t valid = 0;
};

// y [tokens..., hidden] (written): W's row id_t - begin for an id in this tensor's rows, else 0.
// ids: one per token of y, in y's flat order (kPadToken for padding tokens: zeros).
template <typename T>
void embedding_forward(const std::vector<std::int64_t>& ids, const Tensor<T>& weight,
                       const VocabRows& rows, Tensor<T>& y);

// dW (added into: it holds weight's local shape) from dy [tokens..., hidden].
template <typename T>
void embedding_backward(const std::vector<std::int64_t>& ids, const Tensor<T>& dy,
                        const VocabRows& rows, Tensor<T>& dweight);

}  // namespace shardsim
