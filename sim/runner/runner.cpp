#include <unistd.h>

#include <cstdio>

#include "core/error.hpp"
#include "core/mp_arena.hpp"
#include "runner/runner-inl.hpp"

namespace shardsim {

void step_oracle_rows(const StepSpec& step, OracleRowsUse& use) {
  switch (step.kind) {
#define SHARDSIM_OP_ORACLE_ROWS(name, Type)        \
  case OpKind::name:                               \
    check_oracle_rows(step.as<Type##Args>(), use); \
    return;
    SHARDSIM_OP_LIST(SHARDSIM_OP_ORACLE_ROWS)
#undef SHARDSIM_OP_ORACLE_ROWS
  }
}

ReduceOrder effective_reduce_order(const Scenario& scenario, const RunOptions& options) {
  return options.reduce_order.value_or(scenario.mesh.reduce_order);
}

Schedule effective_schedule(const Scenario& scenario, const RunOptions& options) {
  return options.schedule.value_or(scenario.mesh.schedule);
}

std::uint64_t estimate_memory_bytes(const Scenario& scenario, const Precision& precision) {
  // Bytes per element: the scalar itself, or for mp a 56-byte MpBackend (mp_backend.hpp) whose
  // limbs are inline up to 5 and otherwise a block of its own: the limbs of bits + 1 (Boost's
  // precision carries bits or bits + 1: mp256 has 257, mp128 128), from the pools (mp_arena.hpp)
  // without a header up to their largest block, else from malloc with its 16.
  long double per_element = 8;
  if (precision.kind == ScalarKind::f32 || precision.is_narrow()) per_element = 4;  // a float
  if (precision.is_expansion()) per_element = 8 * (precision.bits / 53);  // 2 or 4 doubles
  if (precision.kind == ScalarKind::mp) {
    const long double limbs = (precision.bits + 64) / 64;
    const long double block = limbs > kMpInlineLimbs ? 8 * limbs : 0;
    per_element = kMpValueBytes + block + (block > kMpArenaMaxBlock ? 16 : 0);
  }
  long double elements = 0;
  const int ranks = scenario.mesh.ranks();
  for (const auto& [name, layout] : scenario.tensor_layouts) {
    const long double numel = static_cast<long double>(layout.shape.numel());
    // The oracle's copy, plus one copy per rank divided by the dims that shard it (a Replicate
    // or Partial dim holds a copy or addend on each of its members).
    long double copies = ranks;
    for (int d = 0; d < layout.layout.ndim(); ++d) {
      if (layout.layout.on(d).is_shard()) copies /= scenario.mesh.devices.dim(d).size;
    }
    copies += 1;
    elements += numel * copies;
  }
  // The dropout repetition check of a sharded input: its verdict [rank=k, peer=k] (one row per
  // rank, and the oracle's zero copy) and each rank's drawn words, twice (drawn and dense), and
  // under a padded split each word's 8-byte position too (counted as two elements: at least 4
  // bytes each). Positions are kept only by a rank that skips padding; counting them for any
  // padded split keeps the estimate an upper bound.
  for (const StepSpec& step : scenario.steps) {
    if (step.kind != OpKind::dropout) continue;
    const auto input = scenario.tensor_layouts.find(step.as<DropoutArgs>().input);
    if (input == scenario.tensor_layouts.end() || input->second.layout.is_replicate()) continue;
    const long double k = ranks;
    const int per_x_element = input->second.layout.has_padding() ? 4 : 2;
    elements += 2 * k * k + per_x_element * static_cast<long double>(input->second.shape.numel());
  }
  if (scenario.train_steps > 0) elements *= 2;
  const long double bytes = elements * per_element;
  return bytes >= 1.8e19L ? UINT64_MAX : static_cast<std::uint64_t>(bytes);
}

std::uint64_t default_memory_limit_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return UINT64_MAX;
  return static_cast<std::uint64_t>(pages) / 4 * 3 * static_cast<std::uint64_t>(page_size);
}

void check_memory(const Scenario& scenario, const Precision& precision, const RunOptions& options) {
  const std::uint64_t limit = options.max_memory_bytes.value_or(default_memory_limit_bytes());
  const std::uint64_t needed = estimate_memory_bytes(scenario, precision);
  if (needed <= limit) return;
  auto gib = [](std::uint64_t bytes) {
    char text[64];
    std::snprintf(text, sizeof text, "%.3g GiB", static_cast<double>(bytes) / (1ULL << 30));
    return std::string(text);
  };
  throw InputError(scenario.file + ": scenario '" + scenario.name + "' at " + precision.name() +
                   " is estimated to need " + gib(needed) + " of memory, over the limit of " +
                   gib(limit) + " (raise it with --max-memory)");
}

void prepare_runs(const Scenario& scenario, const std::vector<Precision>& precisions,
                  const Precision* also, const RunOptions& options) {
  for (const Precision& precision : precisions) check_memory(scenario, precision, options);
  if (also) check_memory(scenario, *also, options);
  install_mp_arena_for(precisions, also);
}

template std::vector<TraceEntry> run_scenario(const Scenario&, const RunOptions&,
                                              BoundarySink<float>&, std::optional<NarrowFormat>);
template std::vector<TraceEntry> run_scenario(const Scenario&, const RunOptions&,
                                              BoundarySink<double>&, std::optional<NarrowFormat>);

}  // namespace shardsim
