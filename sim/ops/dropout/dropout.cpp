#include <numeric>

#include "ops/dropout/dropout-inl.hpp"

namespace shardsim {

namespace {

// Visits every local position of a rank's tensor as visit(local_flat, pad, drawn_index,
// global_index): the flat index the policy draws with and the element's flat index in the
// global shape (-1 on padding). Local positions run row-major over the local shape.
template <typename Visit>
void for_each_position(const Shape& local, const DropoutFrame& frame, DropoutPolicy policy,
                       Visit visit) {
  const std::int64_t n = local.numel();
  if (frame.box.empty()) {
    for (std::int64_t at = 0; at < n; ++at) visit(at, false, at, at);
    return;
  }
  const std::size_t axes = frame.box.size();
  std::vector<std::int64_t> stride(axes, 1);  // of the global shape
  for (std::size_t a = axes; a-- > 1;) stride[a - 1] = stride[a] * frame.global.axes()[a].extent;
  std::vector<std::int64_t> index(axes, 0);  // the local multi-index of `at`
  for (std::int64_t at = 0; at < n; ++at) {
    bool pad = false;
    std::int64_t global = 0;
    for (std::size_t a = 0; a < axes; ++a) {
      pad = pad || index[a] >= frame.box[a].valid();
      global += to_global(frame.box[a], index[a]) * stride[a];
    }
    if (pad) global = -1;
    visit(at, pad, policy == DropoutPolicy::global ? global : at, global);
    for (std::size_t a = axes; a-- > 0;) {
      if (++index[a] < local.axes()[a].extent) break;
      index[a] = 0;
    }
  }
}

}  // namespace

DropoutMask dropout_mask(const Shape& local, const DropoutFrame& frame, const DropoutParams& params,
                         DropoutPolicy policy) {
  const std::uint32_t threshold = dropout_threshold(params.p);
  const std::uint64_t seed = dropout_rank_seed(policy, params.seed, frame.rank);
  DropoutMask mask;
  const auto n = static_cast<std::size_t>(local.numel());
  mask.keep.assign(n, 0);
  mask.valid.assign(n, 1);
  for_each_position(
      local, frame, policy, [&](std::int64_t at, bool pad, std::int64_t index, std::int64_t) {
        if (pad) {
          mask.valid[static_cast<std::size_t>(at)] = 0;
          return;
        }
        const std::uint32_t word = dropout_word(seed, params.stream, params.forward_pass,
                                                static_cast<std::uint64_t>(index));
        mask.keep[static_cast<std::size_t>(at)] = dropout_keep(word, threshold) ? 1 : 0;
      });
  return mask;
}

DrawnWords dropout_words(const Shape& local, const DropoutFrame& frame, const DropoutParams& params,
                         DropoutPolicy policy) {
  const std::uint64_t seed = dropout_rank_seed(policy, params.seed, frame.rank);
  DrawnWords words;
  bool skipped = false;  // a padding position skipped: `at` is kept from then on
  for_each_position(
      local, frame, policy,
      [&](std::int64_t at, bool pad, std::int64_t index, std::int64_t global) {
        if (pad) {
          if (!skipped) {  // the words so far sit at their own indices
            skipped = true;
            words.at.resize(words.drawn.size());
            std::iota(words.at.begin(), words.at.end(), std::int64_t{0});
          }
          return;
        }
        if (skipped) words.at.push_back(at);
        words.drawn.push_back(dropout_word(seed, params.stream, params.forward_pass,
                                           static_cast<std::uint64_t>(index)));
        words.dense.push_back(dropout_word(params.seed, params.stream, params.forward_pass,
                                           static_cast<std::uint64_t>(global)));
      });
  return words;
}

SHARDSIM_INSTANTIATE_DROPOUT(float)
SHARDSIM_INSTANTIATE_DROPOUT(double)

}  // namespace shardsim
