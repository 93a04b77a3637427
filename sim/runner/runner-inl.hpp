// Template body of run_scenario. Included by runner.cpp (float, double) and runner_mp.cpp (Mp).
//
// One training step (train_steps = K runs K of them; without it, one forward pass):
//   1. forward: every scenario step, oracle first, then the sharded plan;
//   2. backward (training only): steps in reverse, from the loss;
//   3. parameter gradients: a Partial (per-rank) gradient of a Replicate parameter is
//      all-reduced over the group, its own boundary;
//   4. SGD on the oracle's parameters and on every rank's replica, then a replica-consistency
//      check (all ranks bitwise identical) and a comparison with the oracle.
// With [stream], each training step runs 1-4 once per chunk, in order (the update is per chunk),
// after resetting the steps' carried state (StepOp::begin_stream).
#pragma once

#include <map>
#include <set>
#include <string>

#include "shardsim/ops/sgd.hpp"
#include "shardsim/runner/runner.hpp"
#include "sim/runner/release.hpp"
#include "sim/runner/steps/registry.hpp"

namespace shardsim {

namespace detail {

// Memory: once steps [remaining, n) have run their backward, releases (dense and sharded) every
// entry of `env` that no step still to run may read (sim/runner/release.hpp), so a real-size replay does
// not hold every activation of the oracle and of the ranks until the end. Boundaries are
// compared when they are recorded, so releasing changes no result.
template <typename T>
void release_dead_tensors(StepEnv<T>& env, const std::vector<std::unique_ptr<StepOp<T>>>& ops,
                          std::size_t remaining, const std::set<std::string>& pinned) {
  std::vector<bool> reads_output;
  for (std::size_t j = 0; j < remaining; ++j)
    reads_output.push_back(ops[j]->backward_reads_output());
  const LiveNames live = live_names(env.scenario.steps, reads_output, pinned);
  std::erase_if(env.dense, [&](const auto& entry) { return !live.keeps(entry.first); });
  std::erase_if(env.sharded, [&](const auto& entry) { return !live.keeps(entry.first); });
}

}  // namespace detail

template <typename T>
std::vector<TraceEntry> run_scenario(const Scenario& scenario, const RunOptions& options,
                                     BoundarySink<T>& sink) {
  World<T> world(scenario.mesh.ranks, effective_reduce_order(scenario, options),
                 effective_schedule(scenario, options));
  StepEnv<T> env{scenario, world, {}, {}};
  std::vector<TraceEntry> trace;
  std::set<std::string> identical;  // tensors whose latest boundary matched the oracle bitwise
  int step = 1;
  int chunk = 1;

  // Reports one boundary; `oracle` overrides the dense counterpart (replica checks).
  auto emit = [&](const BoundaryLabel& label, const DistTensor<T>& tensor,
                  const Tensor<T>* oracle) {
    TraceEntry entry;
    entry.id = static_cast<int>(trace.size());
    entry.step = step;
    entry.chunk = chunk;
    entry.kind = label.kind;
    entry.op = label.op;
    entry.tensor = label.tensor;
    entry.dense = label.dense_name();
    entry.exact = label.exact;
    for (const std::string& input : label.inputs) {
      if (!identical.count(input)) entry.exact = false;
    }
    entry.global = tensor.global;
    entry.placement = tensor.placement;
    entry.ranks = rank_extents(tensor.global, tensor.placement, tensor.ranks());
    entry.notes = label.notes;
    if (!oracle && label.has_oracle) {
      auto found = env.dense.find(entry.dense);
      if (found == env.dense.end()) {
        throw InternalError("boundary #" + std::to_string(entry.id) + " (" + entry.op + " -> " +
                            entry.tensor + ") names the oracle tensor '" + entry.dense +
                            "', which no step stored");
      }
      oracle = &found->second;
    }
    if (!oracle && label.exact) {
      throw InternalError("boundary #" + std::to_string(entry.id) + " (" + entry.op + " -> " +
                          entry.tensor + ") claims exactness but has no oracle tensor");
    }
    const bool same = sink.on_boundary(entry, oracle, tensor);
    if (same) {
      identical.insert(label.tensor);
    } else {
      identical.erase(label.tensor);
    }
    trace.push_back(std::move(entry));
    return same;
  };
  world.set_hook([&](const BoundaryLabel& label, const DistTensor<T>& tensor) {
    return emit(label, tensor, nullptr);
  });

  // Inputs and parameters: identical f32-representable values at every precision.
  for (const TensorSpec& spec : scenario.tensors) {
    Tensor<T> global(spec.shape);
    for (std::int64_t i = 0; i < global.numel(); ++i) {
      global[i] = T(init_value(spec.init, spec.init_seed, static_cast<std::uint64_t>(i)));
    }
    DistTensor<T> laid_out = distribute(spec.name, global, spec.placement, world.size());
    env.dense[spec.name] = std::move(global);
    env.sharded[spec.name] = std::move(laid_out);
    world.compare_boundary({.op = "input", .tensor = spec.name, .exact = true, .kind = BoundaryKind::input},
                 env.sharded[spec.name]);
    if (scenario.has_fault("ones_init_assumed") && spec.role == TensorRole::parameter) {
      if (const std::optional<double> value = assumed_default_init(scenario, spec.name)) {
        // The bug: the sharded program trusts default init and overwrites the loaded values.
        DistTensor<T>& param = env.sharded[spec.name];
        world.for_each_rank([&](int r) {
          for (T& v : param.local(r).values()) v = T(*value);
        });
        zero_padding(param);
        world.compare_boundary({.op = "assumed_init",
                      .tensor = spec.name,
                      .exact = true,
                      .kind = BoundaryKind::input,
                      .inputs = {spec.name}},
                     param);
      }
    }
  }

  std::vector<std::unique_ptr<StepOp<T>>> ops;
  for (const StepSpec& spec : scenario.steps) ops.push_back(make_step_op<T>(spec, scenario));
  std::set<std::string> pinned;  // never released: declared tensors, parameter gradients
  for (const TensorSpec& spec : scenario.tensors) {
    pinned.insert(spec.name);
    if (spec.role == TensorRole::parameter) pinned.insert(grad_name(spec.name));
  }

  // Streaming ([stream]): the streamed inputs and targets are kept whole here; before each chunk
  // runs, its slice along the stream axis is loaded for the oracle and laid out over the ranks
  // with the tensor's placement (data loading, recorded as an input boundary of that chunk).
  // Without [stream] there is one chunk and nothing is sliced.
  std::map<std::string, Tensor<T>> whole;
  std::vector<std::int64_t> chunk_lengths{0};
  if (scenario.stream) {
    chunk_lengths = scenario.stream->chunks;
    for (const TensorSpec& spec : scenario.tensors) {
      if (spec.role == TensorRole::parameter || !spec.shape.has(scenario.stream->axis)) continue;
      whole.emplace(spec.name, env.dense.at(spec.name));
    }
  }
  auto load_chunk = [&](int number) {
    std::int64_t begin = 0;
    for (int i = 1; i < number; ++i) begin += chunk_lengths[static_cast<std::size_t>(i - 1)];
    const std::int64_t length = chunk_lengths[static_cast<std::size_t>(number - 1)];
    for (const auto& [name, full] : whole) {
      const std::string& axis = scenario.stream->axis;
      Tensor<T> part(full.shape().with_extent(axis, length));
      copy_along(full, axis, begin, part, 0, length);
      env.sharded[name] =
          distribute(name, part, scenario.find_tensor(name)->placement, world.size());
      env.dense[name] = std::move(part);
      world.compare_boundary({.op = "input", .tensor = name, .exact = true, .kind = BoundaryKind::input},
                   env.sharded[name]);
    }
  };

  const int iterations = std::max(1, scenario.train_steps);
  for (step = 1; step <= iterations; ++step) {
    for (auto& op : ops) op->begin_stream();  // a KV cache starts empty every training step
    for (chunk = 1; chunk <= static_cast<int>(chunk_lengths.size()); ++chunk) {
      load_chunk(chunk);
      for (auto it = env.dense.begin(); it != env.dense.end();) {
        it = it->first.starts_with("grad(") ? env.dense.erase(it) : std::next(it);
      }
      for (auto it = env.sharded.begin(); it != env.sharded.end();) {
        it = it->first.starts_with("grad(") ? env.sharded.erase(it) : std::next(it);
      }
      for (auto& op : ops) op->forward(env);
      if (step == 1 && chunk == 1) {
        ActivationMemory memory;
        memory.per_rank.assign(static_cast<std::size_t>(world.size()), 0);
        for (std::size_t i = 0; i < ops.size(); ++i) {
          std::vector<std::int64_t> bytes = ops[i]->saved_bytes(env);
          if (bytes.empty()) continue;
          for (std::size_t r = 0; r < bytes.size(); ++r) memory.per_rank[r] += bytes[r];
          const StepSpec& spec = scenario.steps[i];
          memory.steps.push_back(
              {spec.index, spec.op, spec.str_or("output", ""), std::move(bytes)});
        }
        sink.on_activation_memory(memory);
      }
      if (scenario.train_steps == 0) continue;

      for (std::size_t i = ops.size(); i-- > 0;) {
        ops[i]->backward(env);
        detail::release_dead_tensors(env, ops, i, pinned);
      }

      for (const TensorSpec& spec : scenario.tensors) {
        if (spec.role != TensorRole::parameter || !env.has_grad(spec.name)) continue;
        const std::string key = grad_name(spec.name);
        DistTensor<T> grad = env.sharded.at(key);
        DistTensor<T>& param = env.sharded.at(spec.name);
        if (grad.placement.is_partial() && param.placement.is_replicate() &&
            scenario.has_fault("unreduced_param_grads")) {
          // The bug: each replica steps with its own rank's share of the gradient.
          grad.placement = Placement::replicate();
        } else if (!(grad.placement == param.placement)) {
          grad = world.redistribute(grad, param.placement, {.tensor = key, .inputs = {key}});
        }
        sgd_update(env.dense.at(spec.name), env.dense.at(key), scenario.learning_rate);
        world.for_each_rank(
            [&](int r) { sgd_update(param.local(r), grad.local(r), scenario.learning_rate); });
        if (param.placement.is_replicate()) {
          const Tensor<T> reference = param.local(0);
          emit({.op = "replica_check",
                .tensor = spec.name + "@replicas",
                .exact = true,
                .kind = BoundaryKind::check},
               param, &reference);
        }
        world.compare_boundary(
            {.op = "sgd", .tensor = spec.name, .kind = BoundaryKind::update, .inputs = {spec.name, key}},
            param);
      }
    }
  }
  return trace;
}

}  // namespace shardsim
