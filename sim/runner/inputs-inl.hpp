// Data loading: members of detail::ScenarioRun (runner-inl.hpp), included by it.
#pragma once

#include <string>
#include <vector>

#include "runner/runner-inl.hpp"

namespace shardsim::detail {

template <typename T>
void ScenarioRun<T>::load_inputs() {
  // Streamed and micro-batched inputs are kept whole (every process lays out its ranks'
  // slices of each chunk or micro-batch).
  std::string whole_axis;
  if (scenario_.stream) {
    whole_axis = scenario_.stream->axis;
  } else if (scenario_.micro_batches >= 2) {
    whole_axis = std::string(kMicroBatchAxis);
  }
  for (const TensorSpec& spec : scenario_.tensors) {
    const bool from_file = spec.init.dist == InitDist::file;
    auto drawn = [&](std::int64_t i) {  // the stored value at global flat index i
      const auto index = static_cast<std::uint64_t>(i);
      return stored_input(from_file ? (*spec.init.values)[index]
                                    : init_value(spec.init, spec.init_seed, index));
    };
    const bool keep_whole =
        !whole_axis.empty() && spec.role != TensorRole::parameter && spec.shape.has(whole_axis);
    std::vector<std::string> notes;
    if (env_.rows && env_.rows->applies(spec.shape) && !keep_whole) {
      // --oracle distributed: the oracle's rows of the input, and the ranks' elements, each
      // drawn by its global index.
      Tensor<T> rows = rows_tensor<T>(spec.shape, *env_.rows, drawn);
      notes = input_rounding_notes<T>(spec, spec.shape.numel(), drawn, env_.storage);
      env_.sharded[spec.name] =
          distribute_generated<T>(spec.name, spec.shape, spec.layout, world_.mesh_ptr(), drawn);
      env_.dense[spec.name] = std::move(rows);
    } else if (env_.oracle || keep_whole) {
      Tensor<T> global(spec.shape);
      for (std::int64_t i = 0; i < global.numel(); ++i) global[i] = drawn(i);
      notes = input_rounding_notes<T>(
          spec, global.numel(), [&](std::int64_t i) -> const T& { return global[i]; },
          env_.storage);
      env_.sharded[spec.name] = distribute(spec.name, global, spec.layout, world_.mesh_ptr());
      if (keep_whole) whole_.emplace(spec.name, global);
      env_.dense[spec.name] = !env_.oracle ? Tensor<T>() : oracle_rows_of(std::move(global));
    } else {
      // A process without the oracle draws only its ranks' elements (the same values, by
      // global index), never the global tensor; its notes are the oracle process's.
      notes = input_rounding_notes<T>(spec, spec.shape.numel(), drawn, env_.storage);
      env_.sharded[spec.name] =
          distribute_generated<T>(spec.name, spec.shape, spec.layout, world_.mesh_ptr(), drawn);
      env_.dense[spec.name] = Tensor<T>();
    }
    world_.compare_boundary({.op = "input",
                             .tensor = spec.name,
                             .exact = true,
                             .kind = BoundaryKind::input,
                             .notes = std::move(notes)},
                            env_.sharded[spec.name]);
    apply_ones_init_assumed(scenario_, spec, world_, env_.sharded[spec.name]);
  }
  if (scenario_.stream) chunk_lengths_ = scenario_.stream->chunks;
}

template <typename T>
Tensor<T> ScenarioRun<T>::oracle_rows_of(Tensor<T> global) const {
  if (!env_.rows || !env_.rows->applies(global.shape())) return global;
  return rows_tensor<T>(global.shape(), *env_.rows,
                        [&](std::int64_t flat) -> const T& { return global[flat]; });
}

template <typename T>
T ScenarioRun<T>::stored_input(double value) const {
  if constexpr (std::is_same_v<T, float>) {
    if (env_.storage)
      return narrow_to_float(*env_.storage, narrow_from_double(*env_.storage, value));
  }
  return T(value);
}

template <typename T>
void ScenarioRun<T>::load_chunk() {
  std::int64_t begin = 0;
  for (int i = 1; i < chunk_; ++i) begin += chunk_lengths_[static_cast<std::size_t>(i - 1)];
  const std::int64_t length = chunk_lengths_[static_cast<std::size_t>(chunk_ - 1)];
  for (const auto& [name, full] : whole_) {
    const std::string& axis = scenario_.stream->axis;
    Tensor<T> part(full.shape().with_extent(axis, length));
    copy_along(full, axis, begin, part, 0, length);
    env_.sharded[name] =
        distribute(name, part, scenario_.find_tensor(name)->layout, world_.mesh_ptr());
    env_.dense[name] = env_.oracle ? oracle_rows_of(std::move(part)) : Tensor<T>();
    world_.compare_boundary(
        {.op = "input", .tensor = name, .exact = true, .kind = BoundaryKind::input},
        env_.sharded[name]);
  }
  std::erase_if(env_.dense, [](const auto& entry) { return is_grad_name(entry.first); });
  std::erase_if(env_.sharded, [](const auto& entry) { return is_grad_name(entry.first); });
}

}  // namespace shardsim::detail
