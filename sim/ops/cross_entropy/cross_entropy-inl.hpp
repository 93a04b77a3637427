// Template bodies of ops/cross_entropy/cross_entropy.hpp.
#pragma once

#include <cmath>
#include <limits>

#include "core/error.hpp"
#include "ops/cross_entropy/cross_entropy.hpp"

namespace shardsim {

namespace detail {

// The logits viewed as [rows, local]: the last axis is the vocabulary.
template <typename T>
std::int64_t ce_local_columns(const Tensor<T>& x) {
  const Shape& shape = x.shape();
  SHARDSIM_ASSERT(shape.rank() >= 1, "cross_entropy: the logits need a vocabulary axis");
  return shape[shape.rank() - 1].extent;
}

template <typename T>
std::int64_t ce_rows(const Tensor<T>& x) {
  const std::int64_t local = ce_local_columns(x);
  return local == 0 ? 0 : x.numel() / local;
}

// How many of a row's local columns take part: the real ones, or all with the padding.
template <typename T>
std::int64_t ce_used_columns(const Tensor<T>& x, const VocabColumns& cols, bool with_pad) {
  return with_pad ? ce_local_columns(x) : cols.valid;
}

}  // namespace detail

template <typename T>
void ce_row_max(const Tensor<T>& x, const VocabColumns& cols, bool with_pad, Tensor<T>& m) {
  const std::int64_t local = detail::ce_local_columns(x);
  const std::int64_t used = detail::ce_used_columns(x, cols, with_pad);
  SHARDSIM_ASSERT(m.numel() == detail::ce_rows(x), "ce_row_max: one max per row");
  for (std::int64_t t = 0; t < m.numel(); ++t) {
    T best = -std::numeric_limits<T>::infinity();
    for (std::int64_t c = 0; c < used; ++c) {
      const T& v = x[t * local + c];
      if (v > best) best = v;
    }
    m[t] = best;
  }
}

template <typename T>
void ce_row_sumexp(const Tensor<T>& x, const VocabColumns& cols, bool with_pad, const Tensor<T>& max,
                   Tensor<T>& s) {
  using std::exp;
  const std::int64_t local = detail::ce_local_columns(x);
  const std::int64_t used = detail::ce_used_columns(x, cols, with_pad);
  SHARDSIM_ASSERT(s.numel() == detail::ce_rows(x) && max.numel() == s.numel(),
                  "ce_row_sumexp: one sum per row");
  for (std::int64_t t = 0; t < s.numel(); ++t) {
    T sum = T(0);
    for (std::int64_t c = 0; c < used; ++c) sum = sum + T(exp(T(x[t * local + c] - max[t])));
    s[t] = sum;
  }
}

template <typename T>
void ce_row_target(const Tensor<T>& x, const VocabColumns& cols,
                   const std::vector<std::int64_t>& labels, const CrossEntropyParams& params,
                   bool unmasked, Tensor<T>& target) {
  const std::int64_t local = detail::ce_local_columns(x);
  SHARDSIM_ASSERT(target.numel() == detail::ce_rows(x) &&
                      static_cast<std::int64_t>(labels.size()) == target.numel(),
                  "ce_row_target: one label and one target per row");
  for (std::int64_t t = 0; t < target.numel(); ++t) {
    const std::int64_t y = labels[static_cast<std::size_t>(t)];
    T value = T(0);
    if (params.counts(y)) {
      if (y >= cols.begin && y < cols.begin + cols.valid) {
        value = x[t * local + (y - cols.begin)];
      } else if (unmasked && local > 0) {
        value = x[t * local];
      }
    }
    target[t] = value;
  }
}

template <typename T>
void ce_row_sum(const Tensor<T>& x, const VocabColumns& cols, Tensor<T>& a) {
  const std::int64_t local = detail::ce_local_columns(x);
  SHARDSIM_ASSERT(a.numel() == detail::ce_rows(x), "ce_row_sum: one sum per row");
  for (std::int64_t t = 0; t < a.numel(); ++t) {
    T sum = T(0);
    for (std::int64_t c = 0; c < cols.valid; ++c) sum = sum + x[t * local + c];
    a[t] = sum;
  }
}

template <typename T>
void ce_token_loss(const Tensor<T>& max, const Tensor<T>& s, const Tensor<T>& target,
                   const Tensor<T>& a, const std::vector<std::int64_t>& labels,
                   const CrossEntropyParams& params, Tensor<T>& lse, Tensor<T>& loss) {
  using std::log;
  const std::int64_t n = max.numel();
  SHARDSIM_ASSERT(s.numel() == n && target.numel() == n &&
                      static_cast<std::int64_t>(labels.size()) == n && lse.numel() == n &&
                      loss.numel() == n,
                  "ce_token_loss: one value per token");
  const T eps(params.label_smoothing);
  const T keep = T(T(1) - eps);
  const T spread = T(eps / T(static_cast<double>(params.vocab)));
  const T z(params.z_loss);
  for (std::int64_t t = 0; t < n; ++t) {
    const T l = T(T(log(s[t])) + max[t]);
    lse[t] = l;
    if (!params.counts(labels[static_cast<std::size_t>(t)])) {
      loss[t] = T(0);
      continue;
    }
    T value = params.label_smoothing > 0 ? T(l - T(keep * target[t])) : T(l - target[t]);
    if (params.label_smoothing > 0) value = value - T(spread * a[t]);
    if (params.z_loss > 0) value = value + T(T(z * l) * l);
    loss[t] = value;
  }
}

template <typename T>
void ce_sum_tokens(const Tensor<T>& loss, const std::vector<std::int64_t>& labels,
                   const CrossEntropyParams& params, bool count_ignored, T& sum,
                   std::int64_t& count) {
  for (std::int64_t t = 0; t < loss.numel(); ++t) {
    const std::int64_t y = labels[static_cast<std::size_t>(t)];
    if (params.counts(y)) {
      sum = sum + loss[t];
      ++count;
    } else if (count_ignored && y != kPadToken) {
      ++count;
    }
  }
}

template <typename T>
void ce_backward(const Tensor<T>& x, const VocabColumns& cols, const std::vector<std::int64_t>& labels,
                 const Tensor<T>& max, const Tensor<T>& s, const Tensor<T>& lse,
                 const CrossEntropyParams& params, bool with_pad, const T& divisor, Tensor<T>& dx) {
  using std::exp;
  const std::int64_t local = detail::ce_local_columns(x);
  const std::int64_t used = detail::ce_used_columns(x, cols, with_pad);
  dx = Tensor<T>(x.shape());  // zeros: padding columns, tokens not counted
  const T eps(params.label_smoothing);
  const T keep = T(T(1) - eps);
  const T spread = T(eps / T(static_cast<double>(params.vocab)));
  const T two_z = T(T(2) * T(params.z_loss));
  for (std::int64_t t = 0; t < max.numel(); ++t) {
    const std::int64_t y = labels[static_cast<std::size_t>(t)];
    if (!params.counts(y)) continue;
    const T scale = params.z_loss > 0 ? T(T(1) + T(two_z * lse[t])) : T(1);
    for (std::int64_t c = 0; c < used; ++c) {
      T g = T(T(exp(T(x[t * local + c] - max[t]))) / s[t]);
      if (params.z_loss > 0) g = g * scale;
      const bool is_target = c < cols.valid && y == cols.begin + c;
      if (params.label_smoothing > 0) {
        if (is_target) g = g - keep;
        g = g - spread;
      } else if (is_target) {
        g = g - T(1);
      }
      dx[t * local + c] = g / divisor;
    }
  }
}

}  // namespace shardsim

// Explicit instantiation list: the op's .cpp instantiates float and double, and CMakeLists.txt
// finds this macro and generates the Mp, NarrowFloat, Dd and Qd units.
#define SHARDSIM_INSTANTIATE_CROSS_ENTROPY(T)                                                     \
  template void ce_row_max(const Tensor<T>&, const VocabColumns&, bool, Tensor<T>&);              \
  template void ce_row_sumexp(const Tensor<T>&, const VocabColumns&, bool, const Tensor<T>&,      \
                              Tensor<T>&);                                                        \
  template void ce_row_target(const Tensor<T>&, const VocabColumns&,                              \
                              const std::vector<std::int64_t>&, const CrossEntropyParams&, bool,  \
                              Tensor<T>&);                                                        \
  template void ce_row_sum(const Tensor<T>&, const VocabColumns&, Tensor<T>&);                    \
  template void ce_token_loss(const Tensor<T>&, const Tensor<T>&, const Tensor<T>&,               \
                              const Tensor<T>&, const std::vector<std::int64_t>&,                 \
                              const CrossEntropyParams&, Tensor<T>&, Tensor<T>&);                 \
  template void ce_sum_tokens(const Tensor<T>&, const std::vector<std::int64_t>&,                 \
                              const CrossEntropyParams&, bool, T&, std::int64_t&);                \
  template void ce_backward(const Tensor<T>&, const VocabColumns&,                                \
                            const std::vector<std::int64_t>&, const Tensor<T>&, const Tensor<T>&, \
                            const Tensor<T>&, const CrossEntropyParams&, bool, const T&,         \
                            Tensor<T>&);
