#include "shardsim/ops/dropout-inl.hpp"

namespace shardsim {

namespace {

// Visits every local position of a rank's tensor as visit(local_flat, pad, drawn_index,
// global_index): the flat index the policy draws with and the element's flat index in the
// global shape. Local positions run as (outer, i, inner) around the sharded axis; the whole
// tensor is one "axis" of extent 1 when the local tensor is the global one.
template <typename Visit>
void for_each_position(const Shape& local, const DropoutFrame& frame, DropoutPolicy policy,
                       Visit visit) {
  const bool sharded = !frame.axis.empty();
  const AxisView lv = sharded ? AxisView::of(local, frame.axis) : AxisView{1, 1, local.numel()};
  const AxisView gv =
      sharded ? AxisView::of(frame.global, frame.axis) : AxisView{1, 1, local.numel()};
  for (std::int64_t o = 0; o < lv.outer; ++o) {
    for (std::int64_t i = 0; i < lv.extent; ++i) {
      const bool pad = sharded && i >= frame.valid;
      for (std::int64_t j = 0; j < lv.inner; ++j) {
        const std::int64_t at = lv.flat(o, i, j);
        const std::int64_t global = pad ? -1 : gv.flat(o, frame.begin + i, j);
        visit(at, pad, policy == DropoutPolicy::global ? global : at, global);
      }
    }
  }
}

}  // namespace

DropoutMask dropout_mask(const Shape& local, const DropoutFrame& frame,
                         const DropoutParams& params, DropoutPolicy policy) {
  const std::uint32_t threshold = dropout_threshold(params.p);
  const std::uint64_t seed = dropout_rank_seed(policy, params.seed, frame.rank);
  DropoutMask mask;
  const auto n = static_cast<std::size_t>(local.numel());
  mask.keep.assign(n, 0);
  mask.valid.assign(n, 1);
  for_each_position(local, frame, policy,
                    [&](std::int64_t at, bool pad, std::int64_t index, std::int64_t) {
                      if (pad) {
                        mask.valid[static_cast<std::size_t>(at)] = 0;
                        return;
                      }
                      const std::uint32_t word =
                          dropout_word(seed, params.stream, params.forward_pass,
                                       static_cast<std::uint64_t>(index));
                      mask.keep[static_cast<std::size_t>(at)] =
                          dropout_keep(word, threshold) ? 1 : 0;
                    });
  return mask;
}

DrawnWords dropout_words(const Shape& local, const DropoutFrame& frame,
                         const DropoutParams& params, DropoutPolicy policy) {
  const std::uint64_t seed = dropout_rank_seed(policy, params.seed, frame.rank);
  DrawnWords words;
  for_each_position(
      local, frame, policy, [&](std::int64_t, bool pad, std::int64_t index, std::int64_t global) {
        if (pad) return;
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
