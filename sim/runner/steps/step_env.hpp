// Private to the runner: the state every step works on, and the step interface.
//
// The oracle runs each step before the sharded plan, so that every sharded boundary finds its
// dense counterpart when it is recorded. Gradients live in the same maps under "grad(NAME)".
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "runner/oracle_rows.hpp"
#include "runner/runner.hpp"
#include "core/storage.hpp"
#include "core/transport.hpp"
#include "core/wire.hpp"
#include "core/world-inl.hpp"
#include "runner/release.hpp"

namespace shardsim {

// The micro-batch the steps are running (gradient accumulation, Scenario::micro_batches).
// index 0: the whole batch, in a run without micro-batches and in the whole-batch oracle pass of
// a run with them (sim/runner/micro_step-inl.hpp).
template <typename T>
struct MicroBatch {
  int index = 0;                   // 1-based; 0: the whole batch
  std::int64_t begin = 0;          // the global batch row of this micro-batch's row 0
  std::vector<std::int64_t> rows;  // every micro-batch's row count, in order (empty: none)
  // The whole-batch oracle's step-level values (each loss's OUT, OUT.sum, OUT.valid_tokens),
  // from the pass that ran the whole batch at once. Null when index is 0.
  const std::map<std::string, Tensor<T>>* whole_oracle = nullptr;
};

// The tensors a narrow run stores in its format (storage.hpp): every declared tensor (input,
// target, parameter), every step's output except a loss's (the loss stays f32), the gradient of
// each, and a gradient's addends ("grad(x).addend"). Everything else a boundary records is an
// op's internal part (statistics, row sums, attention's q/k/v/lse, masks) and stays f32.
inline std::set<std::string> stored_tensor_names(const Scenario& scenario) {
  std::set<std::string> names;
  for (const TensorSpec& spec : scenario.tensors) names.insert(spec.name);
  for (const StepSpec& step : scenario.steps) {
    if (!is_loss(step.kind)) names.insert(step.output());
  }
  for (const std::string& name : std::set<std::string>(names)) {
    names.insert(grad_name(name));
    names.insert(part_name(grad_name(name), "addend"));
  }
  return names;
}

template <typename T>
struct StepEnv {
  const Scenario& scenario;
  World<T> world;  // bound to the running step's mesh dim (ScenarioRun::bind_world)
  std::map<std::string, Tensor<T>> dense;        // the oracle's global tensors
  std::map<std::string, DistTensor<T>> sharded;  // the ranks' tensors
  MicroBatch<T> micro;
  // Narrow runs: the storage format (storage.hpp); none for f32, f64 and mp.
  std::optional<NarrowFormat> storage;
  // Whether this process computes the dense oracle: always over the local transport, only on
  // process 0 over mpi. A process without it runs its ranks' plans only; its `dense` map holds
  // the same names as the oracle's, each an empty placeholder, so that every name-driven
  // decision (has_grad, add_grad's first contribution, releases) is the oracle process's, and
  // every boundary is gathered to process 0 for the comparison (World::share with to_root).
  bool oracle = true;
  // --oracle distributed (oracle_rows.hpp): this process's rows of the batch axis. Every process
  // computes the oracle then, each on its rows: a dense tensor with the axis holds only them.
  std::optional<OracleRows> rows;
  // A forward-only run's entries that outlive the running step's forward (forward_live_names);
  // null in every other run.
  const LiveNames* after_step = nullptr;

  // The shape of the oracle's tensor of global shape `global` on this process.
  Shape dense_shape(const Shape& global) const {
    return rows && rows->applies(global) ? rows->of(global) : global;
  }

  // Rounds a stored value to the storage format in place: float runs only (a NarrowFloat value
  // is in the format already; wider runs have no storage format).
  void round_to_storage(Tensor<T>& tensor) const {
    if constexpr (std::is_same_v<T, float>) {
      if (storage) round_to_narrow(*storage, tensor.data(), tensor.numel());
    }
  }
  // Bytes per activation element as the modelled program holds it (activation memory): the
  // storage format's 2 in a narrow run, else 4 at f32 and 8 at f64 and mp (an mp run is the
  // high-precision reference of the f64 program; its limbs are not a backend's memory). An op's
  // f32 parts (statistics) count part_bytes().
  std::int64_t activation_bytes() const {
    if (storage) return 2;
    return std::is_same_v<T, float> ? 4 : 8;
  }
  std::int64_t part_bytes() const { return storage ? 4 : activation_bytes(); }

  // Stores the oracle's tensor `name` as `compute()` returns it; a process without the oracle
  // stores the empty placeholder and computes nothing.
  template <typename Compute>
  void set_dense(const std::string& name, Compute&& compute) {
    dense[name] = oracle ? Tensor<T>(compute()) : Tensor<T>();
  }

  // A sum over the oracle's rows in ascending order (a parameter gradient, a loss): `add_rows`
  // adds this process's rows into `sums` (null entries skipped) and `count`. Under --oracle
  // distributed the processes run it in process order, each starting from the sums the previous
  // one handed on, so every sum is the whole oracle's left-to-right sum bitwise; the last hands
  // the result to every process. Otherwise add_rows runs once. REQUIRES: the sums start at zero
  // (and count at 0), and add_rows adds rows in ascending order of the batch axis, the leading one.
  template <typename AddRows>
  void chain_rows(const std::vector<Tensor<T>*>& sums, std::int64_t* count, AddRows&& add_rows) {
    if (!rows) {
      add_rows();
      return;
    }
    const Transport& transport = *world.transport();
    const int processes = transport.processes();
    const int me = transport.process();
    for (int p = 0; p < processes; ++p) {
      if (p == me) add_rows();
      const bool last = p + 1 == processes;  // hands the result to every process
      std::vector<std::string> outbox(static_cast<std::size_t>(processes));
      if (p == me) {
        std::string message;
        WireWriter w(message);
        for (Tensor<T>* sum : sums) {
          if (sum) put_tensor(w, *sum);
        }
        w.i64(count ? *count : 0);
        for (int q = 0; q < processes; ++q) {
          if (q != me && (last || q == p + 1)) outbox[static_cast<std::size_t>(q)] = message;
        }
      }
      std::vector<std::string> inbox = transport.exchange(std::move(outbox));
      if (p == me || !(last || me == p + 1)) continue;
      WireReader r(inbox[static_cast<std::size_t>(p)]);
      for (Tensor<T>* sum : sums) {
        if (sum) *sum = get_tensor<T>(r);
      }
      const std::int64_t handed = r.i64();
      if (count) *count = handed;
    }
  }

  // Whether no later step reads entry `name` (a forward-only run's step may then consume it).
  bool spent(const std::string& name) const { return after_step && !after_step->keeps(name); }

  // The oracle's `output` = f(input), computed by `compute(in, out)`. When the input is spent and
  // `in_place` allows it, in the input's own storage (compute(t, t): the kernel must read each
  // element before it writes it), which then becomes the output, so that the oracle never holds
  // both; otherwise into a new tensor, the input kept. A process without the oracle stores the
  // empty placeholder (set_dense) and drops the input's as the oracle does. In place, the step's
  // sharded plan must record no boundary whose oracle is `input` (find_oracle would fail,
  // loudly).
  template <typename Compute>
  void set_dense_from(const std::string& input, const std::string& output, bool in_place,
                      Compute&& compute) {
    if (!oracle) {
      if (in_place && spent(input)) dense.erase(input);
      dense[output] = Tensor<T>();
      return;
    }
    if (in_place && spent(input)) {
      Tensor<T> values = std::move(dense.at(input));
      dense.erase(input);
      compute(values, values);
      dense[output] = std::move(values);
      return;
    }
    Tensor<T> y;
    compute(dense.at(input), y);
    dense[output] = std::move(y);
  }

  // The ranks' tensors of entry `name` when it is spent (no later step reads it), moved out for a
  // plan that computes its output in them (in place); the entry keeps its name, shapes and layout
  // with empty locals until the runner releases it after the step. Empty when it is not spent.
  std::vector<Tensor<T>> take_spent_locals(const std::string& name) {
    if (!spent(name)) return {};
    DistTensor<T>& entry = sharded.at(name);
    std::vector<Tensor<T>> locals = std::move(entry.locals);
    entry.locals.assign(locals.size(), Tensor<T>());
    return locals;
  }

  Tensor<T>& dense_at(const std::string& name) { return dense.at(name); }
  DistTensor<T>& sharded_at(const std::string& name) { return sharded.at(name); }
  // An optional operand (a LayerNorm's weight, a linear's bias): null when the step has none.
  const Tensor<T>* dense_opt(const std::optional<std::string>& name) {
    return name ? &dense.at(*name) : nullptr;
  }
  const DistTensor<T>* sharded_opt(const std::optional<std::string>& name) {
    return name ? &sharded.at(*name) : nullptr;
  }
  bool has_grad(const std::string& name) const { return dense.count(grad_name(name)) != 0; }

  // Adds a gradient contribution for tensor `name` (dense and sharded side by side) and records
  // the boundary "grad(NAME)" with `label`'s op, claim and inputs. The first contribution is
  // stored; later ones are added elementwise in the same order on both sides, after moving the
  // sharded one to the placement already held.
  void add_grad(const std::string& name, Tensor<T> dense_grad, DistTensor<T> sharded_grad,
                BoundaryLabel label) {
    const std::string key = grad_name(name);
    sharded_grad.name = key;
    label.tensor = key;
    auto found = dense.find(key);
    if (found == dense.end()) {
      dense.emplace(key, std::move(dense_grad));
      auto [it, inserted] = sharded.insert_or_assign(key, std::move(sharded_grad));
      world.compare_boundary(label, it->second);
      return;
    }
    // A later contribution is an op's output, stored before it is added (the first one is
    // rounded when its boundary is recorded), unless its kernel stored it rounded. The sum
    // recorded below is new arithmetic: its boundary rounds it.
    if (!label.stored) {
      round_to_storage(dense_grad);
      for (Tensor<T>& local : sharded_grad.locals) round_to_storage(local);
    }
    label.stored = false;
    DistTensor<T>& sharded_sum = sharded.at(key);
    if (!(sharded_grad.layout == sharded_sum.layout)) {
      // The new addend moved to the running sum's layout, compared with the oracle's addend
      // ("grad(h).addend"), not with the sum it is about to join.
      const std::string addend = part_name(key, "addend");
      dense.insert_or_assign(addend, dense_grad);
      sharded_grad = world.redistribute(sharded_grad, sharded_sum.layout,
                                        {.tensor = moved_name(addend, sharded_sum.layout.str()),
                                         .dense = addend,
                                         .exact = !sharded_grad.layout.has_partial(),
                                         .inputs = {key}});
    }
    Tensor<T>& dense_sum = found->second;
    for (std::int64_t i = 0; i < dense_sum.numel(); ++i) dense_sum[i] += dense_grad[i];
    // The tied_grad_one_use fault: a parameter's second use overwrites the first's gradient.
    const TensorSpec* spec = scenario.find_tensor(name);
    const bool overwrite = spec != nullptr && spec->role == TensorRole::parameter &&
                           scenario.has_fault(Fault::tied_grad_one_use);
    world.for_each_rank([&](int r) {
      Tensor<T>& local = sharded_sum.local(r);
      for (std::int64_t i = 0; i < local.numel(); ++i) {
        local[i] = overwrite ? sharded_grad.local(r)[i] : local[i] + sharded_grad.local(r)[i];
      }
    });
    label.inputs.push_back(key);
    world.compare_boundary(label, sharded_sum);
  }
};

// Per-rank bytes of a tensor's locals (padding included: a rank allocates it), from its global
// shape and layout: the same as the locals' sizes, and still right for an entry whose locals a
// plan consumed in place (StepEnv::take_spent_locals). 0 for a rank this process does not hold.
template <typename T>
std::vector<std::int64_t> local_bytes(const DistTensor<T>& tensor, std::int64_t element_bytes) {
  std::vector<std::int64_t> bytes;
  for (int r = 0; r < tensor.ranks(); ++r) {
    const bool held = tensor.held(r);
    bytes.push_back(held ? local_shape(tensor.global, tensor.layout, *tensor.mesh, r).numel() *
                               element_bytes
                         : 0);
  }
  return bytes;
}

// One scenario step: the dense oracle and the sharded plan, forward and backward.
template <typename T>
class StepOp {
 public:
  virtual ~StepOp() = default;
  virtual void forward(StepEnv<T>& env) = 0;
  // Reads grad(outputs) and adds grad(inputs). A step whose output has no gradient is skipped.
  virtual void backward(StepEnv<T>& env) = 0;
  // Whether backward reads the values of this step's `output` (or of the entries derived from
  // it, "OUT.*" and "OUT@*"). After each backward the runner releases every tensor that no step
  // still to run may read (release_dead_tensors); a step whose backward works from its inputs,
  // its own saved state and grad(OUT) says false, so OUT can go before this backward runs.
  virtual bool backward_reads_output() const { return true; }
  // Called at the start of every training step, before its first streamed chunk: a step that
  // carries state from chunk to chunk (a KV cache) resets it here.
  virtual void begin_stream() {}
  // The bytes each rank keeps from forward for this step's backward, one entry per rank, after
  // forward has run (see StepEnv::activation_bytes). Empty: the step keeps nothing it reports.
  virtual std::vector<std::int64_t> saved_bytes(const StepEnv<T>& env) const {
    (void)env;
    return {};
  }
};

}  // namespace shardsim
