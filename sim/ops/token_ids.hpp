// Token ids and labels (i64 tensors, docs/ops/language-model.md) as an op reads them: by each
// token's global index, through the frame of the tensor whose tokens it pairs them with. Shared by
// cross_entropy (labels) and embedding (ids).
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/placement.hpp"
#include "core/shape.hpp"

namespace shardsim {

// The value given to a padded split's padding token (not a token at all).
inline constexpr std::int64_t kPadToken = std::numeric_limits<std::int64_t>::min();

// Where a tensor's tokens sit in the labels: for each token axis (the labels' axes, in order),
// the tensor's share of it, and the first global row of the batch axis (a micro-batch's or an
// oracle process's rows; 0 otherwise).
struct TokenFrame {
  std::vector<Slice> shares;
  std::string batch_axis;
  std::int64_t batch_begin = 0;
};

// The label of every token of a tensor held in `frame`, in the tensor's local flat order; a
// padding position of any token axis gives kPadToken. `ids` is the labels' global tensor, of
// shape `labels`.
inline std::vector<std::int64_t> frame_labels(const Shape& labels,
                                              const std::vector<std::int64_t>& ids,
                                              const TokenFrame& frame) {
  const std::size_t n_axes = labels.rank();
  std::int64_t count = 1;
  for (const Slice& share : frame.shares) count *= share.local_extent;
  std::vector<std::int64_t> out(static_cast<std::size_t>(count), kPadToken);
  std::vector<std::int64_t> index(n_axes, 0);
  for (std::int64_t t = 0; t < count; ++t) {
    std::int64_t flat = 0;
    bool pad = false;
    for (std::size_t a = 0; a < n_axes; ++a) {
      const Slice& share = frame.shares[a];
      if (is_pad(share, index[a])) {
        pad = true;
        break;
      }
      std::int64_t g = to_global(share, index[a]);
      if (labels[a].name == frame.batch_axis) g += frame.batch_begin;
      flat = flat * labels[a].extent + g;
    }
    if (!pad) out[static_cast<std::size_t>(t)] = ids[static_cast<std::size_t>(flat)];
    for (std::size_t a = n_axes; a-- > 0;) {  // the next local index, row-major
      if (++index[a] < frame.shares[a].local_extent) break;
      index[a] = 0;
    }
  }
  return out;
}

// A tensor of global shape `global` (tokens and vocabulary) laid out as `layout`: rank `rank`'s
// frame of the token axes.
inline TokenFrame token_frame(const Shape& global, const Layout& layout, const Mesh& mesh, int rank,
                              const Shape& labels, const std::string& batch_axis,
                              std::int64_t batch_begin) {
  TokenFrame frame{.batch_axis = batch_axis, .batch_begin = batch_begin};
  for (const Axis& axis : labels.axes()) {
    frame.shares.push_back(axis_slice(global, layout, mesh, rank, axis.name));
  }
  return frame;
}

// The whole-axis frame of a dense tensor of shape `shape` whose batch rows start at batch_begin.
inline TokenFrame dense_frame(const Shape& shape, const Shape& labels, const std::string& batch_axis,
                              std::int64_t batch_begin) {
  TokenFrame frame{.batch_axis = batch_axis, .batch_begin = batch_begin};
  for (const Axis& axis : labels.axes()) {
    const std::int64_t n = shape.extent(axis.name);
    frame.shares.push_back({.begin = 0, .end = n, .local_extent = n});
  }
  return frame;
}

}  // namespace shardsim
