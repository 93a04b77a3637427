// Template body of run_scenario. Included by runner.cpp (float, double) and runner_mp.cpp (Mp).
//
// One training step (train_steps = K runs K of them; without it, one forward pass):
//   1. forward: every scenario step, oracle first, then the sharded plan (under fsdp between
//      the all-gather of the step's unit and its release, sim/runner/fsdp.hpp);
//   2. backward (training only): steps in reverse, from the loss (under fsdp each unit gathered
//      again, then its gradients reduce-scattered and the gathered copy released);
//   3. parameter update: a Partial (per-rank) gradient of a Replicate parameter is all-reduced
//      over the group (its own boundary), optionally all gradients clipped by their global norm
//      (clip.hpp), then SGD on the oracle's parameters and on every rank's replica (under fsdp
//      its shard), a replica-consistency check (all ranks bitwise identical) and a comparison
//      with the oracle.
// With [stream], each training step runs 1-3 once per chunk, in order (the update is per chunk),
// after resetting the steps' carried state (StepOp::begin_stream).
// With micro_batches = k >= 2, each training step runs the whole batch once for the oracle
// (nothing recorded), then 1-2 once per micro-batch with the parameter gradients accumulated,
// then 3 once (micro_step-inl.hpp).
#pragma once

#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <type_traits>

#include "shardsim/error.hpp"
#include "shardsim/ops/sgd.hpp"
#include "shardsim/runner/runner.hpp"
#include "sim/runner/boundary_contract.hpp"
#include "sim/runner/clip.hpp"
#include "sim/runner/fsdp.hpp"
#include "sim/runner/fsdp_memory.hpp"
#include "sim/runner/release.hpp"
#include "sim/runner/replicas.hpp"
#include "sim/runner/runner_faults.hpp"
#include "sim/runner/steps/registry.hpp"

namespace shardsim {

namespace detail {

// An f32 run of F64 file values rounds each once, to nearest (float(double)); the note on the
// input boundary says how many moved and how far. f64 and mp runs hold them exactly: no note.
template <typename T>
std::vector<std::string> input_rounding_notes(const TensorSpec& spec) {
  if constexpr (!std::is_same_v<T, float>) {
    return {};
  } else {
    if (spec.init.dist != InitDist::file) return {};
    std::int64_t rounded = 0;
    std::int64_t overflowed = 0;
    double max_rel = 0;
    for (double v : *spec.init.values) {
      const double r = static_cast<double>(static_cast<float>(v));
      if (r == v) continue;
      ++rounded;
      if (std::isinf(r)) {
        ++overflowed;
      } else {
        max_rel = std::max(max_rel, std::fabs(r - v) / std::fabs(v));
      }
    }
    if (rounded == 0) return {};
    char rel[32];
    std::snprintf(rel, sizeof rel, "%.2g", max_rel);
    const std::string count =
        std::to_string(rounded) + " of " + std::to_string(spec.init.values->size());
    return {"f32 run: " + count + " " + spec.init.file_dtype + " values from '" + spec.init.file +
            "' rounded once to nearest f32 (max relative change " + rel + ")" +
            (overflowed ? ", " + std::to_string(overflowed) + " overflowed to inf" : "")};
  }
}

// One run of a scenario at one precision: the world, the oracle's and the ranks' tensors, the
// steps, and the trace. run() calls the phases in the order of the header comment.
template <typename T>
class ScenarioRun {
 public:
  ScenarioRun(const Scenario& scenario, const RunOptions& options, BoundarySink<T>& sink)
      : scenario_(scenario),
        sink_(sink),
        world_(scenario.mesh.devices, effective_reduce_order(scenario, options),
               effective_schedule(scenario, options)),
        env_{scenario, world_, {}, {}, {}},
        on_boundary_(options.on_boundary),
        fsdp_(scenario, world_,
              [this](const BoundaryLabel& label, const DistTensor<T>& x, const Tensor<T>& ref) {
                emit(label, x, &ref);
              }) {
    world_.set_hook([this](const BoundaryLabel& label, const DistTensor<T>& tensor) {
      return emit(label, tensor, nullptr);
    });
  }

  std::vector<TraceEntry> run() {
    load_inputs();
    make_steps();
    const int iterations = std::max(1, scenario_.train_steps);
    for (step_ = 1; step_ <= iterations; ++step_) {
      if (scenario_.micro_batches > 1) {
        run_micro_batched_step();
        continue;
      }
      for (auto& op : ops_) op->begin_stream();  // a KV cache starts empty every training step
      for (chunk_ = 1; chunk_ <= static_cast<int>(chunk_lengths_.size()); ++chunk_) {
        load_chunk();
        forward();
        if (step_ == 1 && chunk_ == 1) report_activation_memory();
        if (scenario_.train_steps == 0) continue;
        backward();
        update_parameters();
      }
    }
    return std::move(trace_);
  }

 private:
  // Records one boundary and hands it to the sink with its oracle tensor, enforcing the
  // boundary contract (trace.hpp). `oracle` overrides the dense counterpart (replica checks).
  bool emit(const BoundaryLabel& label, const DistTensor<T>& tensor, const Tensor<T>* oracle) {
    if (whole_pass_) {
      snapshot_whole_oracle(label);
      return true;
    }
    TraceEntry entry;
    entry.id = static_cast<int>(trace_.size());
    entry.step = step_;
    entry.chunk = chunk_;
    entry.micro = micro_;
    entry.micro_count = scenario_.micro_batches > 1 ? scenario_.micro_batches : 0;
    entry.kind = label.kind;
    entry.op = label.op;
    entry.tensor = label.tensor;
    entry.dense = label.dense_name();
    entry.exact = label.exact;
    for (const std::string& input : label.inputs) {
      if (!identical_.count(input)) entry.exact = false;
    }
    entry.global = tensor.global;
    entry.layout = tensor.layout;
    entry.mesh = tensor.mesh;
    entry.ranks = rank_extents(tensor.global, tensor.layout, *tensor.mesh);
    entry.notes = label.notes;
    entry.inputs = label.inputs;
    entry.scenario_step = scenario_step_;
    Tensor<T> rows;  // a micro-batch's rows of the whole-batch oracle (micro_step-inl.hpp)
    if (!oracle) {
      if (micro_ > 0 && whole_rows(label, rows)) oracle = &rows;
      if (!oracle) oracle = find_oracle(label, entry, env_.dense);
      if (oracle) check_oracle_finite(*oracle, entry);
    }
    const bool same = sink_.on_boundary(entry, oracle, tensor);
    if (on_boundary_) on_boundary_(entry);
    if (same) {
      identical_.insert(label.tensor);
    } else {
      identical_.erase(label.tensor);
    }
    trace_.push_back(std::move(entry));
    return same;
  }

  // A non-finite oracle is no reference: the scenario overflows (or is undefined) at this
  // precision, which is bad input (exit 2), not a divergence of the sharded program.
  void check_oracle_finite(const Tensor<T>& oracle, const TraceEntry& entry) const {
    using std::isfinite;
    for (std::int64_t i = 0; i < oracle.numel(); ++i) {
      if (isfinite(oracle[i])) continue;
      const std::vector<std::int64_t> index = unflatten(oracle.shape(), i);
      std::string at;
      for (std::size_t a = 0; a < index.size(); ++a) {
        at += (a ? ", " : "") + oracle.shape()[a].name + "=" + std::to_string(index[a]);
      }
      throw InputError(scenario_.file + ": the oracle is not finite at boundary #" +
                       std::to_string(entry.id) + " (step " + std::to_string(entry.step) +
                       ", chunk " + std::to_string(entry.chunk) + ", " + entry.op + " -> " +
                       entry.tensor + ") in the " + ScalarTraits<T>::name + " run, first at [" +
                       at +
                       "]: the scenario's values overflow or are undefined at this "
                       "precision, so there is no reference to compare with");
    }
  }

  // Inputs and parameters: drawn ones are f32-representable, identical at every precision;
  // file values (InitDist::file) are exact at f64 and mp, and an f32 run rounds F64 values once
  // to nearest (a note on the input boundary counts them). Streamed inputs and targets are also
  // kept whole, to be sliced per chunk (load_chunk).
  void load_inputs() {
    for (const TensorSpec& spec : scenario_.tensors) {
      Tensor<T> global(spec.shape);
      const bool from_file = spec.init.dist == InitDist::file;
      for (std::int64_t i = 0; i < global.numel(); ++i) {
        const auto index = static_cast<std::uint64_t>(i);
        global[i] = from_file ? T((*spec.init.values)[index])
                              : T(init_value(spec.init, spec.init_seed, index));
      }
      env_.sharded[spec.name] = distribute(spec.name, global, spec.layout, world_.mesh_ptr());
      env_.dense[spec.name] = std::move(global);
      world_.compare_boundary({.op = "input",
                               .tensor = spec.name,
                               .exact = true,
                               .kind = BoundaryKind::input,
                               .notes = input_rounding_notes<T>(spec)},
                              env_.sharded[spec.name]);
      apply_ones_init_assumed(scenario_, spec, world_, env_.sharded[spec.name]);
    }
    if (!scenario_.stream && scenario_.micro_batches < 2) return;
    if (scenario_.stream) chunk_lengths_ = scenario_.stream->chunks;
    const std::string axis(scenario_.stream ? scenario_.stream->axis : kMicroBatchAxis);
    for (const TensorSpec& spec : scenario_.tensors) {
      if (spec.role == TensorRole::parameter || !spec.shape.has(axis)) continue;
      whole_.emplace(spec.name, env_.dense.at(spec.name));
    }
  }

  void make_steps() {
    for (const StepSpec& spec : scenario_.steps) ops_.push_back(make_step_op<T>(spec, scenario_));
    for (const TensorSpec& spec : scenario_.tensors) {
      pinned_.insert(spec.name);
      if (spec.role == TensorRole::parameter) pinned_.insert(grad_name(spec.name));
    }
    for (const std::string& name : fsdp_.pinned()) pinned_.insert(name);
    fsdp_.shard(env_);
  }

  // Data loading for the current chunk: the slice of each streamed input along the stream axis,
  // for the oracle, laid out over the ranks with the tensor's placement (an input boundary of
  // that chunk). Without [stream] there is one chunk and nothing is sliced. Then the previous
  // chunk's gradients are dropped.
  void load_chunk() {
    std::int64_t begin = 0;
    for (int i = 1; i < chunk_; ++i) begin += chunk_lengths_[static_cast<std::size_t>(i - 1)];
    const std::int64_t length = chunk_lengths_[static_cast<std::size_t>(chunk_ - 1)];
    for (const auto& [name, full] : whole_) {
      const std::string& axis = scenario_.stream->axis;
      Tensor<T> part(full.shape().with_extent(axis, length));
      copy_along(full, axis, begin, part, 0, length);
      env_.sharded[name] =
          distribute(name, part, scenario_.find_tensor(name)->layout, world_.mesh_ptr());
      env_.dense[name] = std::move(part);
      world_.compare_boundary(
          {.op = "input", .tensor = name, .exact = true, .kind = BoundaryKind::input},
          env_.sharded[name]);
    }
    std::erase_if(env_.dense, [](const auto& entry) { return is_grad_name(entry.first); });
    std::erase_if(env_.sharded, [](const auto& entry) { return is_grad_name(entry.first); });
  }

  void forward() {
    for (std::size_t i = 0; i < ops_.size(); ++i) {
      scenario_step_ = static_cast<int>(i);
      bind_world(i);
      fsdp_.gather(static_cast<int>(i), env_);
      ops_[i]->forward(env_);
      fsdp_.release(static_cast<int>(i), env_);
    }
    scenario_step_ = -1;
  }

  // The world a step's plans see: bound to the step's mesh dim.
  void bind_world(std::size_t step) { env_.world = world_.on(scenario_.steps[step].mesh_dim); }

  // After the first forward pass: the bytes each rank keeps for backward, per step.
  void report_activation_memory() {
    ActivationMemory memory;
    memory.forward_only = scenario_.train_steps == 0;
    memory.per_rank.assign(static_cast<std::size_t>(world_.size()), 0);
    for (std::size_t i = 0; i < ops_.size(); ++i) {
      bind_world(i);
      std::vector<std::int64_t> bytes = ops_[i]->saved_bytes(env_);
      if (bytes.empty()) continue;
      for (std::size_t r = 0; r < bytes.size(); ++r) memory.per_rank[r] += bytes[r];
      const StepSpec& spec = scenario_.steps[i];
      memory.steps.push_back({spec.index, std::string(spec.op()), spec.output(), std::move(bytes)});
    }
    if (fsdp_.on())
      memory.parameters = fsdp_parameter_memory(scenario_, activation_scalar_bytes<T>());
    sink_.on_activation_memory(memory);
  }

  // Steps in reverse. After each, every tensor no step still to run may read is released
  // (sim/runner/release.hpp), so a real-size replay does not hold every activation of the
  // oracle and of the ranks until the end. Boundaries are compared when they are recorded, so
  // releasing changes no result.
  void backward() {
    for (std::size_t i = ops_.size(); i-- > 0;) {
      scenario_step_ = static_cast<int>(i);
      bind_world(i);
      fsdp_.gather(static_cast<int>(i), env_);
      ops_[i]->backward(env_);
      fsdp_.reduce_grads(static_cast<int>(i), env_);
      fsdp_.release(static_cast<int>(i), env_);
      scenario_step_ = -1;
      std::vector<bool> reads_output;
      for (std::size_t j = 0; j < i; ++j) reads_output.push_back(ops_[j]->backward_reads_output());
      const LiveNames live = live_names(scenario_.steps, reads_output, pinned_);
      std::erase_if(env_.dense, [&](const auto& entry) { return !live.keeps(entry.first); });
      std::erase_if(env_.sharded, [&](const auto& entry) { return !live.keeps(entry.first); });
    }
  }

  // Per parameter: its gradient moved to the parameter's layout (a Partial dim all-reduced or
  // reduce-scattered, in mesh-dim order; under fsdp this happened after its unit's backward),
  // then SGD on the oracle and on every rank's local, a replica check where a dim replicates it,
  // and the comparison with the oracle. With clip_grad_norm every gradient is reduced first,
  // then all are clipped by their global norm (clip.hpp), then the updates run.
  void update_parameters() {
    std::vector<const TensorSpec*> trained;
    for (const TensorSpec& spec : scenario_.tensors) {
      if (spec.role == TensorRole::parameter && env_.has_grad(spec.name)) trained.push_back(&spec);
    }
    if (!scenario_.clip_grad_norm) {
      for (const TensorSpec* spec : trained) {
        reduce_gradient(*spec);
        step_parameter(*spec);
      }
      return;
    }
    std::vector<std::string> dense_grads;
    std::vector<std::string> sharded_grads;
    for (const TensorSpec* spec : trained) {
      reduce_gradient(*spec);
      dense_grads.push_back(grad_name(spec->name));
      const bool owned = fsdp_.owns(spec->name);
      if (owned && !fsdp_.first_member(spec->name)) continue;
      sharded_grads.push_back(grad_name(owned ? fsdp_.storage_name(spec->name) : spec->name));
    }
    clip_gradients(world_, env_, *scenario_.clip_grad_norm, dense_grads, sharded_grads,
                   scenario_.has_fault(Fault::fsdp_clip_padding));
    for (const TensorSpec* spec : trained) step_parameter(*spec);
  }

  void reduce_gradient(const TensorSpec& spec) {
    if (fsdp_.owns(spec.name)) return;
    const std::string key = grad_name(spec.name);
    DistTensor<T>& grad = env_.sharded.at(key);
    const DistTensor<T>& param = env_.sharded.at(spec.name);
    if (skips_gradient_reduce(scenario_, grad, param)) {
      grad.layout = param.layout;
    } else if (!(grad.layout == param.layout)) {
      grad = reduce_param_grad(scenario_, world_, std::move(grad), param, key);
    }
  }

  // SGD of one parameter; under fsdp of its storage (a flat unit once, at its first member).
  void step_parameter(const TensorSpec& spec) {
    std::string name = spec.name;
    std::vector<std::string> members{name};
    DistTensor<T>* param = nullptr;
    if (fsdp_.owns(name)) {
      if (!fsdp_.first_member(name)) return;
      name = fsdp_.storage_name(name);
      members = fsdp_.members(name);
      if (scenario_.has_fault(Fault::fsdp_full_param_step)) {
        fsdp_.step_full_param(name, env_, scenario_.learning_rate);
        return;
      }
      fsdp_.remember_stale(name);
      param = &fsdp_.storage(name);
    } else {
      param = &env_.sharded.at(name);
    }
    const std::string key = grad_name(name);
    const DistTensor<T>& grad = env_.sharded.at(key);
    for (const std::string& m : members) {
      sgd_update(env_.dense.at(m), env_.dense.at(grad_name(m)), scenario_.learning_rate);
    }
    fsdp_.refresh_dense(name, env_);
    world_.for_each_rank(
        [&](int r) { sgd_update(param->local(r), grad.local(r), scenario_.learning_rate); });
    if (has_replicate_dim(param->layout)) {
      const Tensor<T> reference = first_replicas(*param);
      emit({.op = "replica_check",
            .tensor = moved_name(name, "replicas"),
            .exact = true,
            .kind = BoundaryKind::check},
           *param, &reference);
    }
    world_.compare_boundary(
        {.op = "sgd", .tensor = name, .kind = BoundaryKind::update, .inputs = {name, key}}, *param);
  }

  const Scenario& scenario_;
  BoundarySink<T>& sink_;
  World<T> world_;
  StepEnv<T> env_;
  std::function<void(const TraceEntry&)> on_boundary_;  // RunOptions::on_boundary
  std::vector<TraceEntry> trace_;
  std::set<std::string> identical_;  // tensors whose latest boundary matched the oracle bitwise
  int step_ = 1;
  int chunk_ = 1;
  int scenario_step_ = -1;  // the step whose forward or backward is running (TraceEntry)
  Fsdp<T> fsdp_;
  std::vector<std::unique_ptr<StepOp<T>>> ops_;
  std::set<std::string> pinned_;            // never released: declared tensors, parameter gradients
  std::map<std::string, Tensor<T>> whole_;  // streamed or micro-batched inputs, whole
  std::vector<std::int64_t> chunk_lengths_{0};

  // Gradient accumulation (micro_step-inl.hpp).
  void run_micro_batched_step();
  void run_whole_batch_oracle();
  void load_micro_batch();
  void accumulate(const std::string& name);
  void install_accumulated();
  void snapshot_whole_oracle(const BoundaryLabel& label);
  bool whole_rows(const BoundaryLabel& label, Tensor<T>& rows);
  void lay_out_input(const std::string& name, Tensor<T> global);
  bool in_whole_oracle(const BoundaryLabel& label) const;
  static void add_to(Tensor<T>& sum, const Tensor<T>& addend);

  int micro_ = 0;            // the running micro-batch (1-based); 0: none
  bool whole_pass_ = false;  // the whole-batch oracle pass: boundaries are snapshot, not recorded
  std::vector<std::int64_t> micro_rows_;  // each micro-batch's batch rows (torch.chunk)
  // The whole-batch oracle pass's dense tensor at each of its boundaries that has the batch
  // axis, keyed by (oracle name, occurrence within the pass); the micro-batches' boundaries are
  // compared with their rows (whole_rows).
  std::map<std::pair<std::string, int>, Tensor<T>> whole_snapshots_;
  std::map<std::string, int> occurrences_;         // per oracle name, in the running pass
  std::map<std::string, Tensor<T>> whole_oracle_;  // step-level: losses and parameter gradients
  std::map<std::string, Tensor<T>> dense_accumulated_;
  std::map<std::string, DistTensor<T>> sharded_accumulated_;
};

}  // namespace detail

}  // namespace shardsim

#include "sim/runner/micro_step-inl.hpp"

namespace shardsim {

template <typename T>
std::vector<TraceEntry> run_scenario(const Scenario& scenario, const RunOptions& options,
                                     BoundarySink<T>& sink) {
  return detail::ScenarioRun<T>(scenario, options, sink).run();
}

}  // namespace shardsim
