// --oracle distributed: the row blocks and the scenarios they allow (oracle_rows.hpp).
#include "runner/oracle_rows.hpp"

#include <algorithm>
#include <string>

#include "core/error.hpp"

namespace shardsim {

OracleRows oracle_rows(std::int64_t extent, int process, int processes) {
  SHARDSIM_ASSERT(0 <= process && process < processes && processes <= extent,
                  "oracle_rows: 0 <= process < processes <= extent");
  const std::int64_t base = extent / processes;
  const std::int64_t more = extent % processes;  // the first `more` blocks hold one row more
  OracleRows rows;
  rows.begin = process * base + std::min<std::int64_t>(process, more);
  rows.end = rows.begin + base + (process < more ? 1 : 0);
  return rows;
}

std::int64_t oracle_rows_extent(const Scenario& scenario) {
  for (const TensorSpec& spec : scenario.tensors) {
    if (spec.role != TensorRole::parameter) return spec.shape.extent(kOracleRowsAxis);
  }
  SHARDSIM_ASSERT(false, "oracle_rows_extent: the scenario has no input");
  return 0;
}

std::string OracleRowsUse::at_step() const {
  std::string out = scenario_.file;
  if (step_.loc.line > 0) {
    out += ":" + std::to_string(step_.loc.line) + ":" + std::to_string(step_.loc.column);
  }
  return out + ": steps[" + std::to_string(step_.index) + "] (" + std::string(step_.op()) +
         "): --oracle distributed: ";
}

void OracleRowsUse::sums_rows(const std::string& batch_axis) {
  sums_ = true;
  if (batch_axis != kOracleRowsAxis) {
    throw InputError(at_step() + "the loss's batch_axis must be '" + std::string(kOracleRowsAxis) +
                     "', the axis the oracle's row blocks cut; use --oracle root");
  }
}

void OracleRowsUse::reduces_over(const std::string& axis, std::string_view what) {
  if (axis == kOracleRowsAxis) {
    throw InputError(at_step() + "this " + std::string(what) + " reduces over '" + axis +
                     "', the axis the oracle's row blocks cut; use --oracle root");
  }
}

void OracleRowsUse::refuse_in_training(std::string_view why) {
  if (scenario_.train_steps > 0) {
    throw InputError(at_step() + "in training, " + std::string(why) + "; use --oracle root");
  }
}

void check_distributed_oracle(const Scenario& scenario, int processes) {
  const std::string axis(kOracleRowsAxis);
  const std::string flag = "--oracle distributed";
  const std::string head = scenario.file + ": " + flag + ": ";
  if (scenario.micro_batches > 1) {
    throw InputError(head + "micro_batches is not supported; use --oracle root");
  }
  if (scenario.fsdp) throw InputError(head + "fsdp is not supported; use --oracle root");
  if (scenario.stream && scenario.stream->axis == axis) {
    throw InputError(head + "[stream] cuts the '" + axis +
                     "' axis, which the oracle's row blocks cut too; use --oracle root");
  }
  // A sum over rows (a loss; in training, every parameter gradient) is carried from block to
  // block in row order: the batch axis must lead, so that row order is batch-major.
  bool sums_rows = scenario.train_steps > 0;
  for (const StepSpec& step : scenario.steps) {
    OracleRowsUse use(scenario, step);
    step_oracle_rows(step, use);
    sums_rows = sums_rows || use.sums();
  }
  std::int64_t rows = -1;
  for (const TensorSpec& spec : scenario.tensors) {
    if (spec.role == TensorRole::parameter) continue;
    const std::string what = std::string(role_name(spec.role)) + " '" + spec.name + "' ";
    if (!spec.shape.has(axis)) {
      throw InputError(head + what + spec.shape.str() + " has no '" + axis +
                       "' axis, which the oracle's row blocks cut; use --oracle root");
    }
    if (sums_rows && spec.shape[0].name != axis) {
      throw InputError(head + what + spec.shape.str() + ": with a loss or training '" + axis +
                       "' must be the leading axis (sums over rows are carried from block to "
                       "block in row order); use --oracle root");
    }
    const std::int64_t extent = spec.shape.extent(axis);
    if (rows >= 0 && extent != rows) {
      throw InputError(head + what + "has " + std::to_string(extent) + " '" + axis +
                       "' rows, another input " + std::to_string(rows) + "; use --oracle root");
    }
    rows = extent;
  }
  if (rows < 0) throw InputError(head + "the scenario has no input to cut into row blocks");
  if (rows < processes) {
    throw InputError(head + std::to_string(processes) + " processes for " + std::to_string(rows) +
                     " '" + axis + "' rows: every process computes at least one row of the oracle");
  }
}

}  // namespace shardsim
