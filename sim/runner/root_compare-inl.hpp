// compare() over the mpi transport: a member of detail::ScenarioRun, included by runner-inl.hpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "runner/oracle_rows.hpp"
#include "core/transport.hpp"
#include "core/wire.hpp"
#include "runner/runner-inl.hpp"

namespace shardsim::detail {

// compare() over the mpi transport: the boundary gathered to process 0, which holds the
// oracle and compares; its verdict (bitwise or not, or the error the comparison raised) goes
// to every process, so all keep the same trace and raise the same error. The others hand
// the sink the entry alone (no values: a report is written by process 0 only).
template <typename T>
bool ScenarioRun<T>::compare_on_root(const BoundaryLabel& label, const TraceEntry& entry,
                                     const DistTensor<T>& tensor, const Tensor<T>* oracle) {
  if (env_.rows && !oracle && env_.rows->applies(tensor.global)) {
    return compare_blocks(label, entry, tensor);
  }
  const DistTensor<T> gathered = world_.share(tensor, /*to_root=*/true);
  std::string verdict;  // "=" bitwise, "~" not, "I" + an InputError's text, "X" + another's
  if (process0_) {
    try {
      verdict = compare(label, entry, gathered, oracle) ? "=" : "~";
    } catch (const InputError& e) {
      verdict = std::string("I") + e.what();
    } catch (const std::exception& e) {
      verdict = std::string("X") + e.what();
    }
  }
  verdict = world_.from_root(std::move(verdict));
  if (verdict.empty()) throw TransportError("process 0 sent no verdict");
  if (verdict[0] == 'I') throw InputError(verdict.substr(1));
  if (verdict[0] == 'X') throw InternalError(verdict.substr(1));
  if (!process0_) sink_.on_boundary(entry, nullptr, DistTensor<T>{});
  return verdict == "=";
}

// The blocks of one boundary under --oracle distributed, moved to process 0 a group of rows at a
// time (RunOptions::oracle_exchange_elements): for rows of process q's block, process q sends its
// oracle values of them (in a pass with values) and every process the values its ranks hold in them
// (for_each_valid_in_rows order). Every process runs the same passes (`schedule`, the same
// exchanges each): process 0 as its sink asks for them, the others, and whatever the sink left
// out after an error, through finish().
template <typename T>
class BlockExchange final : public OracleBlockFeed<T> {
 public:
  BlockExchange(const Transport& transport, const DistTensor<T>& tensor, const Tensor<T>& rows,
                const OracleRows& own, std::int64_t extent, std::optional<T> max_abs,
                std::int64_t elements_per_exchange)
      : transport_(transport),
        tensor_(tensor),
        rows_(rows),
        own_(own),
        axis_(own.axis),
        extent_(extent),
        max_abs_(std::move(max_abs)),
        elements_per_(elements_per_exchange) {
    if (tensor.layout.has_partial()) schedule_.push_back(false);  // the addend scale first
    schedule_.push_back(true);
  }

  const T* max_abs() const override { return max_abs_ ? &*max_abs_ : nullptr; }

  void stream(bool with_dense, const std::function<void(const OracleBlock<T>&)>& visit) override {
    SHARDSIM_ASSERT(next_ < schedule_.size() && schedule_[next_] == with_dense,
                    "a sink streamed a distributed oracle's blocks out of schedule");
    ++next_;
    pass(with_dense, &visit);
  }

  // The passes nobody asked for yet, without a visitor.
  void finish() {
    while (next_ < schedule_.size()) pass(schedule_[next_++], nullptr);
  }

 private:
  // One pass: every process's rows in order, in groups of whole rows of about elements_per_
  // elements.
  void pass(bool with_dense, const std::function<void(const OracleBlock<T>&)>* visit) {
    const int processes = transport_.processes();
    const std::int64_t row = tensor_.global.numel() / extent_;  // elements per batch row
    const std::int64_t step =
        std::max<std::int64_t>(1, elements_per_ / std::max<std::int64_t>(row, 1));
    std::exception_ptr failed;  // a visitor's error, raised after the pass's last exchange
    for (int q = 0; q < processes; ++q) {
      const OracleRows owned = oracle_rows(extent_, q, processes);
      for (std::int64_t begin = owned.begin; begin < owned.end; begin += step) {
        OracleRows rows = owned;
        rows.begin = begin;
        rows.end = std::min(owned.end, begin + step);
        exchange(rows, with_dense && transport_.process() == q, visit && !failed ? visit : nullptr,
                 failed);
      }
    }
    if (failed) std::rethrow_exception(failed);
  }

  // One exchange: `rows` (of one process's block) to process 0, with this process's oracle values
  // of them when `dense`, and every held rank's values in them.
  void exchange(const OracleRows& rows, bool dense,
                const std::function<void(const OracleBlock<T>&)>* visit,
                std::exception_ptr& failed) {
    const std::size_t axis = tensor_.global.position(axis_);
    std::string message;
    WireWriter w(message);
    w.u64(dense ? 1 : 0);
    if (dense) put_tensor(w, own_rows(rows));
    std::vector<int> held;
    for (int r = 0; r < tensor_.ranks(); ++r) {
      if (tensor_.held(r)) held.push_back(r);
    }
    w.u64(held.size());
    for (int r : held) {
      const Tensor<T>& local = tensor_.local(r);
      std::vector<T> piece;
      for_each_valid_in_rows(
          local.shape(), local_box(tensor_, r), tensor_.global, axis, rows.begin, rows.end,
          [&](std::int64_t local_flat, std::int64_t) { piece.push_back(local[local_flat]); });
      w.u64(static_cast<std::uint64_t>(r));
      WireValues<T>::put(w, piece);
    }
    std::vector<std::string> outbox(static_cast<std::size_t>(transport_.processes()));
    outbox[0] = std::move(message);
    std::vector<std::string> inbox = transport_.exchange(std::move(outbox));
    if (transport_.process() != 0 || !visit) return;
    OracleBlock<T> block;
    block.rows = rows;
    block.pieces.resize(static_cast<std::size_t>(tensor_.ranks()));
    Tensor<T> received;
    for (std::string& from : inbox) {
      WireReader r(from);
      if (r.u64() != 0) {
        received = get_tensor<T>(r);
        block.dense = &received;
      }
      const std::size_t count = r.count(static_cast<std::uint64_t>(tensor_.ranks()));
      for (std::size_t i = 0; i < count; ++i) {
        const std::uint64_t rank = r.u64();
        if (rank >= static_cast<std::uint64_t>(tensor_.ranks())) {
          throw TransportError("wire: a block names no rank of the mesh");
        }
        block.pieces[rank] = WireValues<T>::get(r);
      }
      from = std::string();  // the message's bytes, decoded, go now
    }
    try {
      (*visit)(block);
    } catch (...) {
      failed = std::current_exception();
    }
  }

  // This process's oracle values of `rows` (a part of its own rows), as a tensor of their shape.
  Tensor<T> own_rows(const OracleRows& rows) const {
    const RowsIndex own(tensor_.global, own_);
    return rows_tensor<T>(tensor_.global, rows,
                          [&](std::int64_t flat) -> const T& { return rows_[own.to_block(flat)]; });
  }

  const Transport& transport_;
  const DistTensor<T>& tensor_;
  const Tensor<T>& rows_;  // this process's oracle rows of the boundary
  OracleRows own_;         // which rows they are
  std::string axis_;
  std::int64_t extent_;
  std::optional<T> max_abs_;
  std::int64_t elements_per_;
  std::vector<bool> schedule_;
  std::size_t next_ = 0;
};

// compare_on_root() of a boundary with the batch axis under --oracle distributed: every process
// holds its rows of the oracle. First each block's first non-finite element and largest finite
// |value| go to process 0 (a non-finite oracle raises the same error as on one process, at the
// first element in global order, on every process); then process 0's sink streams the blocks
// (BlockExchange) and its verdict goes to every process as in compare_on_root.
template <typename T>
bool ScenarioRun<T>::compare_blocks(const BoundaryLabel& label, const TraceEntry& entry,
                                    const DistTensor<T>& tensor) {
  const Transport& transport = *world_.transport();
  const Tensor<T>* rows = find_oracle(label, entry, env_.dense);  // the same on every process
  if (!rows) return sink_.on_boundary(entry, nullptr, process0_ ? tensor : DistTensor<T>{});
  SHARDSIM_ASSERT(rows->shape() == env_.rows->of(tensor.global),
                  "an oracle tensor is not this process's rows of the boundary");
  const RowsIndex index(tensor.global, *env_.rows);
  std::string summary;
  {
    WireWriter w(summary);
    const std::int64_t bad = first_not_finite(*rows);
    w.i64(bad < 0 ? -1 : index.to_global(bad));
    std::vector<T> largest;  // the largest finite |value|; none when no value is finite
    using std::abs;
    using std::isfinite;
    for (std::int64_t e = 0; e < rows->numel(); ++e) {
      if (!isfinite((*rows)[e])) continue;
      const T magnitude = abs((*rows)[e]);
      if (largest.empty()) {
        largest.push_back(magnitude);
      } else if (largest[0] < magnitude) {
        largest[0] = magnitude;
      }
    }
    WireValues<T>::put(w, largest);
  }
  std::vector<std::string> outbox(static_cast<std::size_t>(transport.processes()));
  outbox[0] = std::move(summary);
  const std::vector<std::string> inbox = transport.exchange(std::move(outbox));
  std::string verdict;  // "=" bitwise, "~" not, "I" + an InputError's text, "X" + another's
  std::optional<T> max_abs;
  if (process0_) {
    std::int64_t first_bad = -1;
    for (const std::string& from : inbox) {
      WireReader r(from);
      const std::int64_t bad = r.i64();
      if (bad >= 0 && (first_bad < 0 || bad < first_bad)) first_bad = bad;
      const std::vector<T> largest = WireValues<T>::get(r);
      if (!largest.empty() && (!max_abs || *max_abs < largest[0])) max_abs = largest[0];
    }
    if (first_bad >= 0) {
      verdict = std::string("I") + oracle_not_finite(entry, tensor.global, first_bad).what();
    }
  }
  verdict = world_.from_root(std::move(verdict));
  if (!verdict.empty() && verdict[0] == 'I') throw InputError(verdict.substr(1));

  BlockExchange<T> feed(transport, tensor, *rows, *env_.rows, tensor.global.extent(env_.rows->axis),
                        std::move(max_abs), oracle_exchange_elements_);
  if (process0_) {
    try {
      verdict = sink_.on_boundary_blocks(entry, tensor, feed) ? "=" : "~";
    } catch (const InputError& e) {
      verdict = std::string("I") + e.what();
    } catch (const TransportError&) {
      throw;  // a peer is gone: nothing more to exchange with it
    } catch (const std::exception& e) {
      verdict = std::string("X") + e.what();
    }
  }
  feed.finish();
  verdict = world_.from_root(std::move(verdict));
  if (verdict.empty()) throw TransportError("process 0 sent no verdict");
  if (verdict[0] == 'I') throw InputError(verdict.substr(1));
  if (verdict[0] == 'X') throw InternalError(verdict.substr(1));
  if (!process0_) sink_.on_boundary(entry, nullptr, DistTensor<T>{});
  return verdict == "=";
}

}  // namespace shardsim::detail
