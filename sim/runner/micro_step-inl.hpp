// Gradient accumulation: one training step of a scenario with micro_batches = k >= 2. Members of
// detail::ScenarioRun, included by runner-inl.hpp.
//
// One training step:
//   1. The whole-batch oracle (run_whole_batch_oracle): every step forward and backward on the
//      whole batch at once, exactly as a run without micro-batches, recording nothing. At each
//      boundary the dense tensor it would be compared with is kept when it has the batch axis
//      (whole_snapshots_, keyed by name and occurrence), and the step-level values are kept:
//      each loss's value, sum and valid-token count, and every parameter's gradient
//      (whole_oracle_).
//   2. Micro-batch j = 1..k (global batch rows [b_j, b_j + n_j), torch.chunk sizes): the rows of
//      every input and target with the batch axis, laid out with the tensor's placement (input
//      boundaries); forward; backward; accumulation. A boundary whose oracle tensor has the batch
//      axis is compared with rows [b_j, b_j + n_j) of the whole-batch oracle's tensor at the
//      same boundary. One without it (a loss's sum, a micro-batch's share of a parameter
//      gradient) is compared with the dense computation on the micro-batch's rows, which divides
//      by the whole step's valid-token count as the correct program does. Accumulation adds
//      (+=, micro-batches in order) each loss and each parameter gradient into the step's
//      running sum, recorded as "accumulate -> NAME.accumulated" and compared with the same sum
//      of the dense micro-batch values.
//   3. The step's update (labelled micro k): "accumulated -> LOSS" and "accumulated -> grad(W)"
//      compare the sums with the whole-batch oracle's loss and gradient (the claim of gradient
//      accumulation: the summed micro-batch gradients are the whole batch's gradient), then the
//      gradient reduction, SGD and the replica check as without micro-batches; the oracle steps
//      with its whole-batch gradient.
#pragma once

#include <string>

#include "runner/runner-inl.hpp"

namespace shardsim::detail {

template <typename T>
void ScenarioRun<T>::run_micro_batched_step() {
  const int k = scenario_.micro_batches;
  micro_rows_ = micro_batch_rows(whole_.begin()->second.shape().extent(kMicroBatchAxis), k);
  dense_accumulated_.clear();
  sharded_accumulated_.clear();
  chunk_ = 1;
  run_whole_batch_oracle();
  std::vector<std::string> losses;
  for (const StepSpec& spec : scenario_.steps) {
    if (is_loss(spec.kind)) losses.push_back(spec.output());
  }
  for (micro_ = 1; micro_ <= k; ++micro_) {
    occurrences_.clear();
    for (auto& op : ops_) op->begin_stream();
    load_micro_batch();
    forward();
    if (step_ == 1 && micro_ == 1) report_activation_memory();
    for (const std::string& loss : losses) accumulate(loss);
    if (scenario_.train_steps == 0) continue;
    backward();
    for (const TensorSpec& spec : scenario_.tensors) {
      if (spec.role == TensorRole::parameter && env_.has_grad(spec.name)) {
        accumulate(grad_name(spec.name));
      }
    }
  }
  micro_ = k;
  for (const std::string& loss : losses) {
    emit({.op = "accumulated", .tensor = loss, .inputs = {part_name(loss, "accumulated")}},
         sharded_accumulated_.at(loss), &whole_oracle_.at(loss));
  }
  if (scenario_.train_steps > 0) {
    install_accumulated();
    update_parameters();
  }
  micro_ = 0;
  env_.micro = {};
}

// Step 1 of the header comment. The sharded plans run too (their boundaries are not recorded),
// so that every step sees the tensors it always sees.
template <typename T>
void ScenarioRun<T>::run_whole_batch_oracle() {
  whole_pass_ = true;
  micro_ = 0;
  env_.micro = {};
  whole_snapshots_.clear();
  occurrences_.clear();
  whole_oracle_.clear();
  for (auto& op : ops_) op->begin_stream();
  for (const auto& [name, full] : whole_) lay_out_input(name, full);
  std::erase_if(env_.dense, [](const auto& entry) { return is_grad_name(entry.first); });
  std::erase_if(env_.sharded, [](const auto& entry) { return is_grad_name(entry.first); });
  forward();
  for (const StepSpec& spec : scenario_.steps) {
    if (!is_loss(spec.kind)) continue;
    for (const std::string& name : {spec.output(), part_name(spec.output(), loss_parts::sum),
                                    part_name(spec.output(), loss_parts::valid_tokens)}) {
      whole_oracle_.insert_or_assign(name, env_.dense.at(name));
    }
  }
  if (scenario_.train_steps > 0) {
    backward();
    for (const TensorSpec& spec : scenario_.tensors) {
      if (spec.role != TensorRole::parameter || !env_.has_grad(spec.name)) continue;
      const std::string key = grad_name(spec.name);
      whole_oracle_.insert_or_assign(key, env_.dense.at(key));
    }
  }
  whole_pass_ = false;
}

// The current micro-batch's rows of every input and target with the batch axis, for the oracle
// and laid out over the ranks (an input boundary each, noting the rows); the previous
// micro-batch's gradients are dropped.
template <typename T>
void ScenarioRun<T>::load_micro_batch() {
  std::int64_t begin = 0;
  for (int j = 1; j < micro_; ++j) begin += micro_rows_[static_cast<std::size_t>(j - 1)];
  const std::int64_t rows = micro_rows_[static_cast<std::size_t>(micro_ - 1)];
  const std::string axis(kMicroBatchAxis);
  for (const auto& [name, full] : whole_) {
    Tensor<T> part(full.shape().with_extent(axis, rows));
    copy_along(full, axis, begin, part, 0, rows);
    lay_out_input(name, std::move(part));
    const std::string note = "micro-batch " + std::to_string(micro_) + "/" +
                             std::to_string(micro_rows_.size()) + ": " + axis + " rows [" +
                             std::to_string(begin) + ":" + std::to_string(begin + rows) + ") of " +
                             std::to_string(full.shape().extent(axis));
    world_.compare_boundary({.op = "input",
                             .tensor = name,
                             .exact = true,
                             .kind = BoundaryKind::input,
                             .notes = {note}},
                            env_.sharded[name]);
  }
  std::erase_if(env_.dense, [](const auto& entry) { return is_grad_name(entry.first); });
  std::erase_if(env_.sharded, [](const auto& entry) { return is_grad_name(entry.first); });
  env_.micro = {micro_, begin, micro_rows_, &whole_oracle_};
}

template <typename T>
void ScenarioRun<T>::lay_out_input(const std::string& name, Tensor<T> global) {
  env_.sharded[name] =
      distribute(name, global, scenario_.find_tensor(name)->layout, world_.mesh_ptr());
  env_.dense[name] = std::move(global);
}

// Adds this micro-batch's value of `name` (a loss, or a parameter's gradient as its plan left
// it, Partial where it is unreduced) into the step's running sums, dense and sharded, and records
// the sharded sum as NAME.accumulated against the dense one.
template <typename T>
void ScenarioRun<T>::accumulate(const std::string& name) {
  const Tensor<T>& dense = env_.dense.at(name);
  const DistTensor<T>& sharded = env_.sharded.at(name);
  if (micro_ == 1) {
    dense_accumulated_.insert_or_assign(name, dense);
    sharded_accumulated_.insert_or_assign(name, sharded);
  } else {
    add_to(dense_accumulated_.at(name), dense);
    DistTensor<T>& sum = sharded_accumulated_.at(name);
    SHARDSIM_ASSERT(sum.layout == sharded.layout, "micro-batches give one gradient layout");
    world_.for_each_rank([&](int r) { add_to(sum.local(r), sharded.local(r)); });
  }
  const std::string key = part_name(name, "accumulated");
  DistTensor<T> recorded = sharded_accumulated_.at(name);
  recorded.name = key;
  emit({.op = "accumulate", .tensor = key, .inputs = {name}}, recorded,
       &dense_accumulated_.at(name));
}

template <typename T>
void ScenarioRun<T>::add_to(Tensor<T>& sum, const Tensor<T>& addend) {
  SHARDSIM_ASSERT(sum.shape() == addend.shape(), "accumulation: shapes differ");
  for (std::int64_t i = 0; i < sum.numel(); ++i) sum[i] = sum[i] + addend[i];
}

// Before the update: the oracle's gradient is the whole batch's, the ranks' the accumulated sum
// ("accumulated -> grad(W)" compares them).
template <typename T>
void ScenarioRun<T>::install_accumulated() {
  for (const TensorSpec& spec : scenario_.tensors) {
    const std::string key = grad_name(spec.name);
    if (spec.role != TensorRole::parameter || !sharded_accumulated_.count(key)) continue;
    env_.dense.insert_or_assign(key, whole_oracle_.at(key));
    DistTensor<T>& grad =
        env_.sharded.insert_or_assign(key, sharded_accumulated_.at(key)).first->second;
    grad.name = key;
    emit({.op = "accumulated", .tensor = key, .inputs = {part_name(key, "accumulated")}}, grad,
         nullptr);
  }
}

// A boundary the micro-batches compare with the whole-batch oracle: not an input (those are
// the whole tensors' rows already), with an oracle tensor that has the batch axis.
template <typename T>
bool ScenarioRun<T>::in_whole_oracle(const BoundaryLabel& label) const {
  if (label.kind == BoundaryKind::input || !label.has_oracle) return false;
  auto found = env_.dense.find(label.dense_name());
  return found != env_.dense.end() && found->second.shape().has(std::string(kMicroBatchAxis));
}

template <typename T>
void ScenarioRun<T>::snapshot_whole_oracle(const BoundaryLabel& label) {
  if (!in_whole_oracle(label)) return;
  const std::string& name = label.dense_name();
  whole_snapshots_.insert_or_assign({name, ++occurrences_[name]}, env_.dense.at(name));
}

// The current micro-batch's rows of the whole-batch oracle's tensor at the same boundary (the
// same oracle name, the same occurrence in the pass). False when there is none: the boundary
// is then compared with the dense computation on the micro-batch's rows.
template <typename T>
bool ScenarioRun<T>::whole_rows(const BoundaryLabel& label, Tensor<T>& rows) {
  if (!in_whole_oracle(label)) return false;
  const std::string& name = label.dense_name();
  auto found = whole_snapshots_.find({name, ++occurrences_[name]});
  if (found == whole_snapshots_.end()) return false;
  const std::string axis(kMicroBatchAxis);
  const Shape& shape = env_.dense.at(name).shape();
  const Tensor<T>& whole = found->second;
  if (!(whole.shape().with_extent(axis, shape.extent(axis)) == shape)) return false;
  rows = Tensor<T>(shape);
  copy_along(whole, axis, env_.micro.begin, rows, 0, shape.extent(axis));
  return true;
}

}  // namespace shardsim::detail
