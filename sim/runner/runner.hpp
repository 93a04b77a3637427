// The runner executes a scenario at one precision. It holds the dense oracle (plain global
// tensors) and the world of ranks running the sharded plans, side by side, and hands every
// boundary to a sink: the trace entry, the oracle's global tensor and the ranks' local tensors.
// It does not judge; the compare layer does (it implements the sink).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "runner/oracle_rows.hpp"
#include "scenario/scenario.hpp"
#include "core/storage.hpp"
#include "core/trace.hpp"
#include "core/transport.hpp"
#include "core/world.hpp"

namespace shardsim {

// Parameter memory under fsdp, per rank, with elements counted at the width activations use (4
// bytes at f32, 8 at f64 and mp). FSDP allocates padded shards, so the figures include padding:
// flat: every rank holds c = ceil(N/k) elements of a unit of N and gathers k c; per_param (FSDP2
// pads each dim-0 chunk): ceil(n0/k) rows of the rank's compute-local n0 rows times the other
// extents, gathered k times that. One unit is gathered at a time (after its step it is released),
// so the peak is the largest unit's.
struct ParameterMemory {
  std::string style;                          // "flat" | "per_param"
  std::string dim;                            // the mesh dim the parameters are sharded over
  std::vector<std::int64_t> sharded_params;   // every unit's shard
  std::vector<std::int64_t> sharded_grads;    // the reduce-scattered gradient shards (training)
  std::vector<std::int64_t> optimizer_state;  // plain SGD keeps none: zeros; AdamW two moments
  bool adamw = false;
  std::vector<std::int64_t> gathered_peak;    // the largest unit's gathered parameters
  // Its unsharded gradients, held from the unit's backward to its reduce-scatter (training).
  std::vector<std::int64_t> unsharded_grads_peak;
};

// Activation memory: the bytes each rank keeps from the forward pass for backward, per step and
// summed (training step 1; shapes do not change between training steps). An activation element
// counts 2 bytes at bf16 and f16 (an op's f32 statistics 4), 4 at f32 and 8 at f64 and mp, a
// dropout mask one byte per element. Steps that keep
// nothing they report (redistribute, add, mse_loss) are absent.
struct ActivationMemory {
  struct StepShare {
    int step = 0;  // index in [[steps]]
    std::string op;
    std::string output;
    std::vector<std::int64_t> bytes;  // per rank
  };
  std::vector<std::int64_t> per_rank;  // summed over steps
  std::vector<StepShare> steps;
  // A forward-only run (no train_steps) keeps nothing for a backward that never runs: the figures
  // are what one training step would keep, and the run table does not print them.
  bool forward_only = false;
  std::optional<ParameterMemory> parameters;  // under fsdp only
};

template <typename T>
class BoundarySink {
 public:
  virtual ~BoundarySink() = default;
  // `dense` is null when the boundary has no oracle counterpart. Returns whether every element
  // matched `dense` bitwise (false when there is no counterpart).
  virtual bool on_boundary(const TraceEntry& entry, const Tensor<T>* dense,
                           const DistTensor<T>& sharded) = 0;
  // --oracle distributed (oracle_rows.hpp): a boundary whose oracle is held in row blocks over
  // the processes, streamed to process 0's sink by `feed`; `sharded` gives the layout and holds
  // only this process's locals. Returns as on_boundary. Sinks that never see such a run need
  // not implement it.
  virtual bool on_boundary_blocks(const TraceEntry& entry, const DistTensor<T>& sharded,
                                  OracleBlockFeed<T>& feed) {
    (void)entry;
    (void)sharded;
    (void)feed;
    throw InternalError("this boundary sink does not compare a distributed oracle");
  }
  // Called once, after the first forward pass.
  virtual void on_activation_memory(const ActivationMemory& memory) { (void)memory; }
};

struct RunOptions {
  std::optional<ReduceOrder> reduce_order;  // overrides the scenario's mesh.reduce_order
  std::optional<Schedule> schedule;         // overrides the scenario's mesh.schedule
  std::optional<Accumulate> accumulate;     // bf16/f16 runs: overrides the scenario's accumulate
  // Opt-in (off by default, for memory): the comparator keeps every boundary's values, see
  // CapturedBoundary in compare.hpp. `shardsim precision` and `run --golden` use it.
  bool capture_tensors = false;
  // With capture_tensors: also keep each mp/dd/qd value's exact text (CapturedValues::exact),
  // which the precision ladder's gaps need. Goldens need only the rounded values, and the text
  // costs a string per value (`run --golden` turns it off: at mp256 it was a third of a golden
  // run's time and a quarter of its memory on an attention layer). CapturedBoundary::exact_text
  // says whether a capture has the texts.
  bool capture_exact = true;
  // Refuse to run when the memory estimate exceeds this many bytes (default: 3/4 of the
  // machine's physical memory).
  std::optional<std::uint64_t> max_memory_bytes;
  // Called after each boundary is recorded, on the calling thread, with its trace entry: the
  // CLI's progress line. Observes only; must not throw.
  std::function<void(const TraceEntry&)> on_boundary;
  // The mpi transport (transport.hpp): this process runs its block of the ranks. Process 0 runs
  // the dense oracle and its sink gets every boundary gathered from all processes; the other
  // processes' sinks get each trace entry alone (no oracle, no locals). Null: the local
  // transport.
  std::shared_ptr<const Transport> transport;
  // --oracle distributed (oracle_rows.hpp; with a transport only): every process computes the
  // oracle on its block of batch rows, and process 0 compares boundaries block by block.
  // REQUIRES: check_distributed_oracle passed.
  bool distributed_oracle = false;
  // With it: about how many elements of a boundary one exchange moves to process 0 (whole batch
  // rows, at least one), so that process 0 holds that much of the oracle and of the ranks'
  // values at a time. Tests lower it to make many exchanges of a small scenario.
  std::int64_t oracle_exchange_elements = std::int64_t{1} << 16;
};

// A lower bound on the bytes a run at `precision` holds: every tensor the program defines, once
// for the oracle and once per rank copy in the sharded world (a Replicate tensor is held by every
// rank), doubled for gradients when training. Computed in long double and saturated, so it cannot
// overflow.
std::uint64_t estimate_memory_bytes(const Scenario& scenario, const Precision& precision);
std::uint64_t default_memory_limit_bytes();

// Throws InputError, before anything is allocated, when the estimate exceeds the limit; the
// message says how many GiB would be needed.
void check_memory(const Scenario& scenario, const Precision& precision, const RunOptions& options);
// Before a command's runs: check_memory for each of `precisions` and `also` (when not null), then
// the mp allocation policy for all of them (install_mp_arena_for, mp_arena.hpp).
void prepare_runs(const Scenario& scenario, const std::vector<Precision>& precisions,
                  const Precision* also, const RunOptions& options);

// The effective mesh settings of a run.
ReduceOrder effective_reduce_order(const Scenario& scenario, const RunOptions& options);
Schedule effective_schedule(const Scenario& scenario, const RunOptions& options);

// Runs every step of `scenario` densely and sharded, reporting each boundary to `sink`.
// Returns the trace. For T = Mp the caller has set the mp precision (set_mp_precision), for
// T = NarrowFloat the format (set_narrow_float_format). `storage`: a narrow run's format, whose
// stored boundary values are rounded to it (storage.hpp); T is then float (accumulate = f32) or
// NarrowFloat (accumulate = storage).
template <typename T>
std::vector<TraceEntry> run_scenario(const Scenario& scenario, const RunOptions& options,
                                     BoundarySink<T>& sink,
                                     std::optional<NarrowFormat> storage = std::nullopt);

extern template std::vector<TraceEntry> run_scenario(const Scenario&, const RunOptions&,
                                                     BoundarySink<float>&,
                                                     std::optional<NarrowFormat>);
extern template std::vector<TraceEntry> run_scenario(const Scenario&, const RunOptions&,
                                                     BoundarySink<double>&,
                                                     std::optional<NarrowFormat>);

}  // namespace shardsim
