// Template bodies of ops/embedding/embedding.hpp.
#pragma once

#include "core/error.hpp"
#include "ops/embedding/embedding.hpp"

namespace shardsim {

template <typename T>
void embedding_forward(const std::vector<std::int64_t>& ids, const Tensor<T>& weight,
                       const VocabRows& rows, Tensor<T>& y) {
  const std::int64_t hidden = weight.shape()[1].extent;
  SHARDSIM_ASSERT(static_cast<std::int64_t>(ids.size()) * hidden == y.numel(),
                  "embedding_forward: one id per row of y");
  for (std::size_t t = 0; t < ids.size(); ++t) {
    const std::int64_t id = ids[t];
    const bool held = id != kPadToken && id >= rows.begin && id < rows.begin + rows.valid;
    const std::int64_t out = static_cast<std::int64_t>(t) * hidden;
    for (std::int64_t h = 0; h < hidden; ++h) {
      y[out + h] = held ? weight[(id - rows.begin) * hidden + h] : T(0);
    }
  }
}

template <typename T>
void embedding_backward(const std::vector<std::int64_t>& ids, const Tensor<T>& dy,
                        const VocabRows& rows, Tensor<T>& dweight) {
  const std::int64_t hidden = dweight.shape()[1].extent;
  SHARDSIM_ASSERT(static_cast<std::int64_t>(ids.size()) * hidden == dy.numel(),
                  "embedding_backward: one id per row of dy");
  for (std::size_t t = 0; t < ids.size(); ++t) {
    const std::int64_t id = ids[t];
    if (id == kPadToken || id < rows.begin || id >= rows.begin + rows.valid) continue;
    const std::int64_t in = static_cast<std::int64_t>(t) * hidden;
    const std::int64_t row = (id - rows.begin) * hidden;
    for (std::int64_t h = 0; h < hidden; ++h) dweight[row + h] = dweight[row + h] + dy[in + h];
  }
}

}  // namespace shardsim

// Explicit instantiation list: the op's .cpp instantiates float and double, and CMakeLists.txt
// finds this macro and generates the Mp, NarrowFloat, Dd and Qd units.
#define SHARDSIM_INSTANTIATE_EMBEDDING(T)                                                        \
  template void embedding_forward(const std::vector<std::int64_t>&, const Tensor<T>&,           \
                                  const VocabRows&, Tensor<T>&);                                \
  template void embedding_backward(const std::vector<std::int64_t>&, const Tensor<T>&,          \
                                   const VocabRows&, Tensor<T>&);
