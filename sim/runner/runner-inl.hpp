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

#include "core/error.hpp"
#include "core/narrow_float.hpp"
#include "ops/adamw.hpp"
#include "ops/sgd.hpp"
#include "runner/runner.hpp"
#include "runner/boundary_contract.hpp"
#include "runner/clip.hpp"
#include "runner/fsdp.hpp"
#include "runner/fsdp_memory.hpp"
#include "runner/input_notes.hpp"
#include "runner/release.hpp"
#include "runner/replicas.hpp"
#include "runner/runner_faults.hpp"
#include "runner/steps/registry.hpp"

namespace shardsim {

namespace detail {

// One run of a scenario at one precision: the world, the oracle's and the ranks' tensors, the
// steps, and the trace. run() calls the phases in the order of the header comment.
template <typename T>
class ScenarioRun {
 public:
  ScenarioRun(const Scenario& scenario, const RunOptions& options, BoundarySink<T>& sink,
              std::optional<NarrowFormat> storage)
      : scenario_(scenario),
        sink_(sink),
        world_(scenario.mesh.devices, effective_reduce_order(scenario, options),
               effective_schedule(scenario, options), options.transport),
        env_{scenario, world_, {}, {}, {}, storage},
        on_boundary_(options.on_boundary),
        fsdp_(scenario, world_,
              [this](const BoundaryLabel& label, DistTensor<T>& x, const Tensor<T>& ref) {
                emit(label, x, &ref);
              }) {
    constexpr bool narrow_capable = std::is_same_v<T, float> || std::is_same_v<T, NarrowFloat>;
    SHARDSIM_ASSERT(!storage || narrow_capable,
                    "narrow storage runs compute in float or NarrowFloat");
    // Over mpi the oracle runs on process 0 alone (step_env.hpp), or with --oracle distributed
    // on every process, each on its rows of the batch axis (oracle_rows.hpp).
    const Transport* transport = options.transport.get();
    process0_ = !transport || transport->process() == 0;
    env_.oracle = process0_;
    if (options.distributed_oracle && transport) {
      check_distributed_oracle(scenario, transport->processes());
      env_.rows =
          oracle_rows(oracle_rows_extent(scenario), transport->process(), transport->processes());
      oracle_exchange_elements_ = options.oracle_exchange_elements;
      env_.oracle = true;
    }
    world_.set_hook([this](const BoundaryLabel& label, DistTensor<T>& tensor) {
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
  // A narrow run first rounds a stored value to its format, the ranks' and the oracle's alike,
  // unless the kernel that wrote them already did (label.stored).
  bool emit(const BoundaryLabel& label, DistTensor<T>& tensor, const Tensor<T>* oracle) {
    if (whole_pass_) {
      snapshot_whole_oracle(label);
      return true;
    }
    const bool narrow = stores_narrow(label);
    if (narrow && !label.stored) {
      for (Tensor<T>& local : tensor.locals) env_.round_to_storage(local);
      auto dense = env_.dense.find(label.dense_name());
      if (!oracle && label.has_oracle && dense != env_.dense.end()) {
        env_.round_to_storage(dense->second);
      }
    }
    TraceEntry entry;
    entry.narrow = narrow;
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
    const bool same = world_.transport() ? compare_on_root(label, entry, tensor, oracle)
                                         : compare(label, entry, tensor, oracle);
    if (on_boundary_) on_boundary_(entry);
    if (same) {
      identical_.insert(label.tensor);
    } else {
      identical_.erase(label.tensor);
    }
    trace_.push_back(std::move(entry));
    return same;
  }

  // Hands the boundary and its oracle tensor to the sink; returns whether it matched bitwise.
  // `oracle` overrides the dense counterpart.
  bool compare(const BoundaryLabel& label, const TraceEntry& entry, const DistTensor<T>& tensor,
               const Tensor<T>* oracle) {
    Tensor<T> rows;  // a micro-batch's rows of the whole-batch oracle (micro_step-inl.hpp)
    if (!oracle) {
      if (micro_ > 0 && whole_rows(label, rows)) oracle = &rows;
      if (!oracle) oracle = find_oracle(label, entry, env_.dense);
      if (oracle) check_oracle_finite(*oracle, entry);
    }
    return sink_.on_boundary(entry, oracle, tensor);
  }

  // compare() over the mpi transport (root_compare-inl.hpp).
  bool compare_on_root(const BoundaryLabel& label, const TraceEntry& entry,
                       const DistTensor<T>& tensor, const Tensor<T>* oracle);
  // compare_on_root() of a boundary whose oracle is in row blocks (--oracle distributed).
  bool compare_blocks(const BoundaryLabel& label, const TraceEntry& entry,
                      const DistTensor<T>& tensor);
  // The first non-finite element of an oracle tensor (flat), or -1.
  static std::int64_t first_not_finite(const Tensor<T>& oracle);
  // The error for a non-finite oracle at element `flat` of a tensor of shape `shape`.
  InputError oracle_not_finite(const TraceEntry& entry, const Shape& shape,
                               std::int64_t flat) const;
  // The run's precision in messages: a bf16/f16 run's storage format (its T is float), else T's.
  std::string run_name() const {
    return env_.storage ? narrow_name(*env_.storage) : ScalarTraits<T>::name;
  }

  // A non-finite oracle is no reference (update_step-inl.hpp): bad input, exit 2.
  void check_oracle_finite(const Tensor<T>& oracle, const TraceEntry& entry) const;

  // Inputs and parameters: drawn ones are f32-representable, identical at f32 and wider;
  // file values (InitDist::file) are exact at f64 and mp, and an f32 run rounds F64 values once
  // to nearest. A narrow run rounds every value once to its format (a file's double directly).
  // A note on the input boundary counts the values that moved. Streamed inputs and targets are
  // also kept whole, to be sliced per chunk (load_chunk).
  void load_inputs();

  // This process's rows of a global oracle tensor under --oracle distributed (oracle_rows.hpp);
  // otherwise, or for a tensor without the batch axis, the tensor itself.
  Tensor<T> oracle_rows_of(Tensor<T> global) const;

  // An input value as the run stores it: T(v), except that a narrow float run rounds the
  // double once to its format (float(v) first could round twice).
  T stored_input(double value) const;

  void make_steps() {
    for (const StepSpec& spec : scenario_.steps) ops_.push_back(make_step_op<T>(spec, scenario_));
    for (const TensorSpec& spec : scenario_.tensors) {
      pinned_.insert(spec.name);
      if (spec.role == TensorRole::parameter) pinned_.insert(grad_name(spec.name));
    }
    for (const std::string& name : fsdp_.pinned()) pinned_.insert(name);
    if (scenario_.adamw()) {  // AdamW's moments live from one update to the next
      const std::set<std::string> held = pinned_;
      for (const std::string& name : held) {
        if (is_grad_name(name)) continue;
        pinned_.insert(part_name(name, "exp_avg"));
        pinned_.insert(part_name(name, "exp_avg_sq"));
      }
    }
    // A forward-only run without [stream] reads a declared tensor only in the steps that name
    // it: no update, no later chunk or micro-batch. With FSDP the units gather their parameters
    // by unit, not by step, so they stay.
    const bool once = scenario_.train_steps == 0 && scenario_.micro_batches < 2 &&
                      !scenario_.stream && !fsdp_.on();
    forward_pinned_ = once ? std::set<std::string>() : pinned_;
    fsdp_.shard(env_);
    if (env_.storage) stored_names_ = stored_tensor_names(scenario_);
  }

  // Whether a narrow run stores this boundary's values in its format (storage.hpp): the
  // boundary's oracle tensor is a stored tensor (stored_tensor_names) and it is not a check.
  bool stores_narrow(const BoundaryLabel& label) const {
    return env_.storage && label.kind != BoundaryKind::check &&
           stored_names_.count(label.dense_name()) != 0;
  }

  // Data loading for the current chunk: the slice of each streamed input along the stream axis,
  // for the oracle, laid out over the ranks with the tensor's placement (an input boundary of
  // that chunk). Without [stream] there is one chunk and nothing is sliced. Then the previous
  // chunk's gradients are dropped.
  void load_chunk();

  // Every step forward. The first pass that reports activation memory records each step's
  // saved bytes right after its forward. A forward-only run then releases every entry no later
  // step names (forward_live_names), so it holds one step's tensors at a time, not all; without
  // [stream] that includes the declared inputs and parameters (forward_pinned_).
  void forward() {
    const bool forward_only = scenario_.train_steps == 0 && scenario_.micro_batches < 2;
    const bool measure = saved_bytes_.empty() && !whole_pass_;
    for (std::size_t i = 0; i < ops_.size(); ++i) {
      scenario_step_ = static_cast<int>(i);
      bind_world(i);
      fsdp_.gather(static_cast<int>(i), env_);
      const LiveNames live = forward_live_names(scenario_.steps, i + 1, forward_pinned_);
      env_.after_step = forward_only ? &live : nullptr;
      ops_[i]->forward(env_);
      env_.after_step = nullptr;
      fsdp_.release(static_cast<int>(i), env_);
      if (measure) saved_bytes_.push_back(ops_[i]->saved_bytes(env_));
      if (!forward_only) continue;
      std::erase_if(env_.dense, [&](const auto& entry) { return !live.keeps(entry.first); });
      std::erase_if(env_.sharded, [&](const auto& entry) { return !live.keeps(entry.first); });
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
      std::vector<std::int64_t> bytes = saved_bytes_[i];  // recorded by forward()
      if (bytes.empty()) continue;
      bytes = world_.from_owners(std::move(bytes));  // a rank's figure comes from its process
      for (std::size_t r = 0; r < bytes.size(); ++r) memory.per_rank[r] += bytes[r];
      const StepSpec& spec = scenario_.steps[i];
      memory.steps.push_back({spec.index, std::string(spec.op()), spec.output(), std::move(bytes)});
    }
    if (fsdp_.on()) memory.parameters = fsdp_parameter_memory(scenario_, env_.activation_bytes());
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

  // The parameter update of a training step (update_step-inl.hpp).
  void update_parameters();
  void reduce_gradient(const TensorSpec& spec);
  // SGD of one parameter; `clip_coef`: the ranks' clipping coefficient when clip_grad_norm
  // clipped the gradients (null otherwise).
  void step_parameter(const TensorSpec& spec, const DistTensor<T>* clip_coef = nullptr);
  void adamw_parameter(const std::string& name, const std::vector<std::string>& members,
                       DistTensor<T>& param, const DistTensor<T>& grad);

  const Scenario& scenario_;
  BoundarySink<T>& sink_;
  bool process0_ = true;  // this process writes the trace's values: the local one, or mpi's 0
  std::int64_t oracle_exchange_elements_ = 0;  // RunOptions::oracle_exchange_elements
  World<T> world_;
  StepEnv<T> env_;
  std::function<void(const TraceEntry&)> on_boundary_;  // RunOptions::on_boundary
  std::vector<TraceEntry> trace_;
  std::set<std::string> identical_;  // tensors whose latest boundary matched the oracle bitwise
  int step_ = 1;
  int chunk_ = 1;
  std::int64_t updates_ = 0;  // parameter updates so far: AdamW's t
  int scenario_step_ = -1;  // the step whose forward or backward is running (TraceEntry)
  Fsdp<T> fsdp_;
  std::vector<std::unique_ptr<StepOp<T>>> ops_;
  std::set<std::string> pinned_;            // never released: declared tensors, parameter gradients
  std::set<std::string> forward_pinned_;    // what forward() of a forward-only run never releases
  std::set<std::string> stored_names_;      // narrow runs: what stores_narrow rounds
  std::map<std::string, Tensor<T>> whole_;  // streamed or micro-batched inputs, whole
  std::vector<std::int64_t> chunk_lengths_{0};
  std::vector<std::vector<std::int64_t>> saved_bytes_;  // per step, from the first measured pass

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

#include "runner/inputs-inl.hpp"
#include "runner/micro_step-inl.hpp"
#include "runner/root_compare-inl.hpp"
#include "runner/update_step-inl.hpp"

namespace shardsim {

template <typename T>
std::vector<TraceEntry> run_scenario(const Scenario& scenario, const RunOptions& options,
                                     BoundarySink<T>& sink, std::optional<NarrowFormat> storage) {
  return detail::ScenarioRun<T>(scenario, options, sink, storage).run();
}

}  // namespace shardsim
