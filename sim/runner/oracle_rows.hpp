// `run --oracle distributed` (docs/mpi.md): the dense oracle in row
// blocks over the processes.
//
// Every process computes the oracle on its own block of rows of the batch axis (kOracleRowsAxis):
// contiguous, in process order, balanced as torch.tensor_split (8 rows over 3 processes: 0-2,
// 3-5, 6-7). Tensors without that axis (parameters, a dropout's repetition table) are whole on
// every process. The ops allowed compute each batch row from that row alone, so a block's values
// are bitwise the rows of the whole oracle; the sums that do cross rows (a loss, the parameter
// gradients in training) are carried from block to block in row order (StepEnv::chain_rows), and
// check_distributed_oracle refuses everything else. At a boundary whose tensor has the axis,
// process 0 compares group of rows by group (OracleBlockFeed): the rows' owner sends its oracle
// values of them, and every process the values its ranks hold in them, so no process holds more
// than its own rows of the oracle and one group in transit.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/placement.hpp"
#include "core/tensor.hpp"
#include "scenario/scenario.hpp"

namespace shardsim {

inline constexpr std::string_view kOracleRowsAxis = "batch";

// The rows of kOracleRowsAxis one process computes: global [begin, end).
struct OracleRows {
  std::string axis{kOracleRowsAxis};
  std::int64_t begin = 0;
  std::int64_t end = 0;

  bool applies(const Shape& global) const { return global.has(axis); }
  // The block's shape: `global` with the axis' extent end - begin. REQUIRES: applies(global).
  Shape of(const Shape& global) const { return global.with_extent(axis, end - begin); }
};

// Process `process`'s rows of an axis of `extent` rows over `processes` (tensor_split sizes).
// REQUIRES: 0 <= process < processes <= extent.
OracleRows oracle_rows(std::int64_t extent, int process, int processes);

// Throws InputError, naming the scenario file (and the step, located), when `scenario` cannot run
// with --oracle distributed over `processes` processes: micro-batches or fsdp; [stream] on the
// batch axis; attention in training; a loss whose batch_axis is another axis; a norm over the
// batch axis; an input without the batch axis, or inputs with different extents of it; the batch
// axis not leading with a loss or training (carried sums need batch-major row order); fewer
// batch rows than processes.
void check_distributed_oracle(const Scenario& scenario, int processes);

// What one step asks of the row blocks, for check_distributed_oracle. Every op's step.hpp defines
// an overload check_oracle_rows(const TypeArgs&, OracleRowsUse&) (the build fails without one),
// which says what the op does across rows of the batch axis; an op that computes each row from
// that row alone says nothing. Each call throws a located InputError when the rows cannot carry it.
class OracleRowsUse {
 public:
  OracleRowsUse(const Scenario& scenario, const StepSpec& step)
      : scenario_(scenario), step_(step) {}

  // The op sums over rows (a loss) along `batch_axis`, which must be the row axis; the sum is
  // carried from block to block in row order (StepEnv::chain_rows).
  void sums_rows(const std::string& batch_axis);
  // The op (`what`, e.g. "norm") reduces over `axis`, which must not be the row axis.
  void reduces_over(const std::string& axis, std::string_view what);
  // In training the op totals over rows in an order row blocks would change (`why`): refused.
  void refuse_in_training(std::string_view why);

  bool sums() const { return sums_; }

 private:
  std::string at_step() const;

  const Scenario& scenario_;
  const StepSpec& step_;
  bool sums_ = false;
};

// Calls the check_oracle_rows overload of `step`'s op (runner.cpp, where every op's step.hpp is
// included).
void step_oracle_rows(const StepSpec& step, OracleRowsUse& use);

// The batch axis' extent: that of the scenario's inputs. REQUIRES: check_distributed_oracle passed.
std::int64_t oracle_rows_extent(const Scenario& scenario);

// Flat positions of a block of rows inside the global tensor, row-major: the axis at `axis`,
// `inner` elements per row of it.
struct RowsIndex {
  std::int64_t inner = 1;   // product of the extents after the axis
  std::int64_t extent = 0;  // the global extent of the axis
  std::int64_t begin = 0;   // the block's first row
  std::int64_t rows = 0;    // the block's row count

  RowsIndex(const Shape& global, const OracleRows& block) {
    const std::size_t axis = global.position(block.axis);
    for (std::size_t a = axis + 1; a < global.rank(); ++a) inner *= global[a].extent;
    extent = global[axis].extent;
    begin = block.begin;
    rows = block.end - block.begin;
  }
  std::int64_t row_of(std::int64_t global_flat) const { return global_flat / inner % extent; }
  std::int64_t to_global(std::int64_t block_flat) const {
    const std::int64_t outer = block_flat / (rows * inner);
    const std::int64_t rest = block_flat % (rows * inner);
    return (outer * extent + begin + rest / inner) * inner + rest % inner;
  }
  std::int64_t to_block(std::int64_t global_flat) const {
    const std::int64_t outer = global_flat / (extent * inner);
    return (outer * rows + row_of(global_flat) - begin) * inner + global_flat % inner;
  }
};

// The rows `rows` of a tensor of shape `global` as a tensor of their own shape (rows.of(global)):
// element i is at(its global flat index).
template <typename T, typename At>
Tensor<T> rows_tensor(const Shape& global, const OracleRows& rows, At at) {
  Tensor<T> out(rows.of(global));
  const RowsIndex index(global, rows);
  for (std::int64_t i = 0; i < out.numel(); ++i) out[i] = at(index.to_global(i));
  return out;
}

// for_each_valid (dist_tensor.hpp) restricted to the positions whose global row on `axis` (an
// index into `box`) lies in [begin, end): f(local_flat, global_flat), row-major local order.
template <typename F>
void for_each_valid_in_rows(const Shape& local, const std::vector<Slice>& box, const Shape& global,
                            std::size_t axis, std::int64_t begin, std::int64_t end, F f) {
  const std::size_t axes = box.size();
  // Per axis, the (local, global) positions visited, ascending.
  std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>> at(axes);
  for (std::size_t a = 0; a < axes; ++a) {
    for (std::int64_t i = 0; i < box[a].valid(); ++i) {
      const std::int64_t g = to_global(box[a], i);
      if (a == axis && (g < begin || g >= end)) continue;
      at[a].emplace_back(i, g);
    }
    if (at[a].empty()) return;
  }
  if (axes == 0) return;  // a scalar has no rows
  std::vector<std::size_t> index(axes, 0);
  while (true) {
    std::int64_t local_flat = 0;
    std::int64_t global_flat = 0;
    for (std::size_t a = 0; a < axes; ++a) {
      local_flat = local_flat * local[a].extent + at[a][index[a]].first;
      global_flat = global_flat * global[a].extent + at[a][index[a]].second;
    }
    f(local_flat, global_flat);
    std::size_t a = axes;
    while (a > 0) {
      --a;
      if (++index[a] < at[a].size()) break;
      index[a] = 0;
      if (a == 0) return;
    }
  }
}

// One block of a boundary, as process 0's comparator sees it.
template <typename T>
struct OracleBlock {
  OracleRows rows;
  // The oracle's values of the rows (shape rows.of(global)); null in a pass without them.
  const Tensor<T>* dense = nullptr;
  // Per rank: the values its local holds in these rows, in for_each_valid_in_rows order.
  std::vector<std::vector<T>> pieces;
};

// A boundary whose oracle lives in row blocks, streamed block by block to process 0's sink.
template <typename T>
class OracleBlockFeed {
 public:
  virtual ~OracleBlockFeed() = default;
  // The largest finite |value| of the oracle over every block; null when none is finite.
  virtual const T* max_abs() const = 0;
  // Hands every block to `visit`, in row order; with_dense: with the oracle's values. A sink calls
  // stream(false) once first when the boundary's layout has a Partial dim, then stream(true) once.
  virtual void stream(bool with_dense, const std::function<void(const OracleBlock<T>&)>& visit) = 0;
};

}  // namespace shardsim
